"""``devs webhooks list|redeliver`` and ``devs deadlines run`` as a user runs
them: listings, refusals with their exit codes, a redelivery, the sweeper
run once and beside another process holding the lease."""

from __future__ import annotations

import time

from devs.adapters.config import Settings, open_service
from devs.adapters.notify.sweeper import Sweeper
from devs.domain.policy import Policy
from tests.e2e.test_cli import Devs, assert_one_line_error, devs
from tests.integration.test_console_outbox import dead_letter

__all__ = ["devs"]


def test_an_empty_outbox_says_how_to_configure_one(devs: Devs) -> None:
    said = devs("webhooks", "list").stdout
    assert "no endpoint yet: set DEVS_WEBHOOK_URLS" in said
    assert devs.json("webhooks", "list") == {"channels": [], "deliveries": []}


def test_redeliver_needs_one_of_an_id_or_failed(devs: Devs) -> None:
    assert (
        "give a MESSAGE_ID or --failed" in devs("webhooks", "redeliver", code=2).stderr
    )
    both = devs("webhooks", "redeliver", "msg_" + "0" * 32, "--failed", code=2)
    assert "one of them" in both.stderr
    unknown = devs("webhooks", "redeliver", "msg_" + "0" * 32, code=7)
    assert_one_line_error(unknown, "no delivery of message")
    malformed = devs("webhooks", "redeliver", "msg_<script>", code=6)
    assert_one_line_error(malformed, "message_id must be a message id")
    assert (
        devs("webhooks", "redeliver", "--failed").stdout == "0 deliveries due again\n"
    )


def test_a_dead_letter_is_listed_and_redelivered(devs: Devs) -> None:
    service = open_service(Settings(db=str(devs.db)))
    try:
        message_id = dead_letter(service, "t1")
    finally:
        service.close()
    listing = devs("webhooks", "list", "--state", "dead").stdout
    assert message_id in listing
    assert "https://hooks.test/x" in listing
    report = devs.json("webhooks", "list", "--state", "dead")
    assert [d["message_id"] for d in report["deliveries"]] == [message_id]
    assert devs("webhooks", "redeliver", message_id).stdout == (
        "1 deliveries due again\n"
    )
    assert devs.json("webhooks", "list", "--state", "dead")["deliveries"] == []
    bad_state = devs("webhooks", "list", "--state", "lost", code=2)
    assert "lost" in bad_state.stderr


def test_deadlines_run_once_and_beside_a_process_holding_the_lease(
    devs: Devs,
) -> None:
    service = open_service(Settings(db=str(devs.db)), policy=Policy(human_deadline=0.3))
    try:
        service.start_task("t1")
        for i in range(3):
            service.record_gate("t1", 1, strategy=f"s{i}", error="e")
        time.sleep(0.4)
        holder = Sweeper(service, None)
        assert holder.sweep() == (["t1"], [])  # holds the lease now
        service.start_task("t2")
        for i in range(3):
            service.record_gate("t2", 1, strategy=f"s{i}", error="e")
        time.sleep(0.4)
        said = devs("deadlines", "run", "--once").stdout
        assert "another process sweeps this database's deadlines" in said
        holder.release()  # a clean stop gives it back
        said = devs("deadlines", "run", "--once").stdout
        assert said == (
            "t2: no answer before its deadline; handed off\n1 handed off, 0 reminded\n"
        )
    finally:
        service.close()
