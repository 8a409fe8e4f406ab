"""The LangGraph adapter's spend breaker (issue 39, point 4): a watched node's
AI messages have their ``usage_metadata`` recorded against the task's
budgets, and a usage that spends one suspends the graph until a person
raises it. A real compiled graph, a real SqliteSaver, scripted models that
answer as LangChain's Anthropic and OpenAI chat models do; in process and
over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi.testclient import TestClient
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from devs.adapters.client import HttpRecoveryClient
from devs.adapters.config import Settings, memory_env, open_service
from devs.adapters.http import create_app
from devs.adapters.langgraph import Backend, DevsState, Referee
from devs.domain import InvalidInput, Policy, RecoveryService
from tests.langgraph_agent import TEST_COMMAND, config, saver

SONNET = "claude-sonnet-4-5-20250929"  # $3 in, $15 out, $0.30 cache read, $3.75 write
GPT = "gpt-5-2025-08-07"  # $1.25 in, $10 out, $0.125 cached


class State(DevsState, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    after: int


def anthropic(
    ident: str | None,
    *,
    fresh: int,
    output: int,
    cache_read: int = 0,
    cache_creation: int = 0,
) -> AIMessage:
    """An AIMessage as langchain-anthropic makes it: ``input_tokens`` the sum
    of the fresh input and the cache's reads and writes, the model in
    ``model_name`` and ``model``."""
    return AIMessage(
        content="done",
        id=ident,
        response_metadata={
            "model_name": SONNET,
            "model": SONNET,
            "model_provider": "anthropic",
        },
        usage_metadata={
            "input_tokens": fresh + cache_read + cache_creation,
            "output_tokens": output,
            "total_tokens": fresh + cache_read + cache_creation + output,
            "input_token_details": {
                "cache_read": cache_read,
                "cache_creation": cache_creation,
            },
        },
    )


def openai(ident: str | None, *, prompt: int, cached: int, output: int) -> AIMessage:
    """An AIMessage as langchain-openai makes it: ``input_tokens`` the
    prompt's tokens, the cached ones among them; reasoning among the
    output's."""
    return AIMessage(
        content="done",
        id=ident,
        response_metadata={"model_name": GPT, "model_provider": "openai"},
        usage_metadata={
            "input_tokens": prompt,
            "output_tokens": output,
            "total_tokens": prompt + output,
            "input_token_details": {"cache_read": cached, "audio": 0},
            "output_token_details": {"reasoning": output // 2, "audio": 0},
        },
    )


@dataclass
class ScriptedChat:
    """The model node: each call returns the next update of its script
    (the last one again once it runs out)."""

    script: Sequence[Any]
    calls: int = 0

    def __call__(self, state: State) -> Any:
        update = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return update


def build(
    referee: Referee,
    model: Callable[..., Any],
    checkpointer: Any,
    *,
    turns: int = 1,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """model (watched) -> after, ``turns`` times; the referee routes from
    the model (a human's ``skip`` ends the graph)."""

    def after(state: State) -> dict[str, Any]:
        return {"after": state.get("after", 0) + 1}

    def again(state: State) -> str:
        return "model" if state.get("after", 0) < turns else END

    graph = StateGraph(State)
    graph.add_node("model", referee.watch(model))
    graph.add_node("after", after)
    graph.add_edge(START, "model")
    graph.add_conditional_edges(
        "model", referee.route, {"proceed": "after", "retry": "model", "end": END}
    )
    graph.add_conditional_edges("after", again, ["model", END])
    return graph.compile(checkpointer=checkpointer)


def open_budgeted(tokens: int | None = None) -> RecoveryService:
    return open_service(
        Settings(db=memory_env()["DEVS_DB"], database_url=None),
        policy=Policy(task_budget_tokens=tokens),
    )


Watch = Callable[..., tuple[RecoveryService, Referee]]


@pytest.fixture(params=["in-process", "http"])
def watching(request: pytest.FixtureRequest) -> Iterator[Watch]:
    """A service under a token budget (None: none), and a referee that
    talks to it: in process, or over the HTTP API (FastAPI's TestClient,
    through HttpRecoveryClient)."""
    with ExitStack() as stack:

        def make(tokens: int | None = None) -> tuple[RecoveryService, Referee]:
            service = open_budgeted(tokens)
            stack.callback(service.close)
            backend: Backend = service
            if request.param == "http":
                client = stack.enter_context(TestClient(create_app(service)))
                backend = HttpRecoveryClient(client)
            service.start_task("t")
            return service, Referee(backend, test_command=TEST_COMMAND)

        yield make


def usages(service: RecoveryService, task_id: str = "t") -> list[dict[str, Any]]:
    return [
        entry.changes
        for entry in service.history(task_id)
        if entry.event == "UsageRecorded"
    ]


def interrupt_of(result: dict[str, Any]) -> dict[str, Any]:
    interrupts = result.get("__interrupt__")
    assert interrupts, f"the graph was not suspended: {result}"
    assert len(interrupts) == 1
    value: dict[str, Any] = interrupts[0].value
    return value


def test_a_watched_node_records_the_usage_of_the_ai_messages_it_returns(
    tmp_path: Path, watching: Watch
) -> None:
    service, referee = watching()
    model = ScriptedChat(
        [
            {
                "messages": [
                    HumanMessage("fix add()", id="h1"),
                    anthropic(
                        "msg_01A",
                        fresh=100,
                        output=50,
                        cache_read=800,
                        cache_creation=200,
                    ),
                    ToolMessage("ok", tool_call_id="call_1", id="tool1"),
                    openai("chatcmpl-B", prompt=1_000, cached=400, output=300),
                ]
            }
        ]
    )
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        result = build(referee, model, checkpointer).invoke(
            {"task_id": "t"}, config("a")
        )
    assert "__interrupt__" not in result
    assert result["after"] == 1
    recorded = usages(service)
    assert [
        (
            u["model"],
            u["input_tokens"],
            u["output_tokens"],
            u["cache_read_tokens"],
            u["cache_creation_tokens"],
            u["usage_id"],
        )
        for u in recorded
    ] == [
        # the cache's reads and writes are taken off LangChain's input_tokens
        (SONNET, 100, 50, 800, 200, "msg_01A"),
        (GPT, 600, 300, 400, 0, "chatcmpl-B"),
    ]
    # priced by the table: 100 x $3 + 50 x $15 + 800 x $0.30 + 200 x $3.75,
    # and 600 x $1.25 + 300 x $10 + 400 x $0.125, per million tokens
    assert recorded[0]["cost_usd"] == pytest.approx(0.00204)
    assert recorded[1]["cost_usd"] == pytest.approx(0.0038)
    spend = service.task("t").spend
    assert spend is not None
    assert spend.tokens == 1_150 + 1_300
    assert spend.spent_usd == pytest.approx(0.00584)
    devs = result["devs"]
    assert (devs["where"], devs["route"], devs["warned"]) == ("spend", "proceed", False)
    assert devs["spend"]["tokens"] == 2_450
    assert service.task("t").state == "RUNNING"


def test_a_message_alone_in_a_channel_and_a_commands_update_are_read(
    tmp_path: Path, watching: Watch
) -> None:
    service, referee = watching()
    model = ScriptedChat(
        [
            {"messages": anthropic("msg_alone", fresh=3, output=4)},
            Command(
                update={"messages": openai("resp_cmd", prompt=5, cached=0, output=6)}
            ),
        ]
    )
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        result = build(referee, model, checkpointer, turns=2).invoke(
            {"task_id": "t"}, config("a")
        )
    assert result["after"] == 2
    assert [(u["usage_id"], u["input_tokens"]) for u in usages(service)] == [
        ("msg_alone", 3),
        ("resp_cmd", 5),
    ]
    assert result["devs"]["where"] == "spend"  # written through the Command
    assert result["devs"]["spend"]["tokens"] == 18


def test_the_same_message_returned_again_counts_once(
    tmp_path: Path, watching: Watch
) -> None:
    service, referee = watching()
    same = anthropic("msg_same", fresh=10, output=5)
    # a message with no id is counted in each step that returns it
    model = ScriptedChat(
        [
            {"messages": [same, same, openai(None, prompt=20, cached=0, output=2)]},
            {"messages": [same, openai(None, prompt=20, cached=0, output=2)]},
        ]
    )
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        result = build(referee, model, checkpointer, turns=2).invoke(
            {"task_id": "t"}, config("a")
        )
    assert model.calls == 2
    assert result["after"] == 2
    recorded = usages(service)
    ids = [u["usage_id"] for u in recorded]
    assert ids.count("msg_same") == 1
    assert len(recorded) == 3  # msg_same, and the id-less message of each step
    spend = service.task("t").spend
    assert spend is not None
    assert spend.tokens == 15 + 22 + 22


def test_a_budget_the_node_spends_suspends_the_graph_until_raised_and_resumed(
    tmp_path: Path, watching: Watch
) -> None:
    service, referee = watching(tokens=1_000)
    model = ScriptedChat(
        [
            {"messages": [anthropic("msg_big", fresh=900, output=600)]},
            {"messages": [anthropic("msg_next", fresh=10, output=10)]},
        ]
    )
    resume = {"action": "resume", "actor": "ann", "reason": "worth it"}
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee, model, checkpointer, turns=2)
        payload = interrupt_of(graph.invoke({"task_id": "t"}, config("a")))
        assert payload["devs"] == "suspended"
        assert payload["reason"] == "budget_exhausted"
        assert payload["where"] == "spend"
        assert payload["outcome"] == "pause"
        assert payload["state"] == "PAUSED"
        assert payload["spend"]["tokens"] == 1_500
        assert payload["spend"]["budget_tokens"] == 1_000
        assert payload["answers"] == ["resume", "rewind", "skip", "claim"]
        assert [s.session_id for s in service.pending_sessions()] == [
            payload["session_id"]
        ]
        assert graph.get_state(config("a")).values.get("after") is None

        # resumed before the budget was raised: refused, suspended again
        refused = interrupt_of(graph.invoke(Command(resume=resume), config("a")))
        assert refused["reason"] == "budget_exhausted"
        assert "raise" in refused["error"]["detail"]
        assert service.task("t").state == "PAUSED"

        service.raise_budget("t", tokens=5_000, actor="ann", reason="worth it")
        result = graph.invoke(Command(resume=resume), config("a"))
    assert "__interrupt__" not in result
    assert result["after"] == 2  # the graph went on, and ran the model again
    assert result["devs"]["where"] == "spend"
    assert model.calls == 2  # resuming did not call the model again
    # the work the budget stop held back was kept
    assert [m.id for m in result["messages"]] == ["msg_big", "msg_next"]
    assert [u["usage_id"] for u in usages(service)] == ["msg_big", "msg_next"]
    task = service.task("t")
    assert task.state == "RUNNING"
    assert task.spend is not None
    assert task.spend.tokens == 1_520
    resumed = [e for e in service.history("t") if e.event == "Resumed"]
    assert [e.changes["actor"] for e in resumed] == ["ann"]
    assert service.pending_sessions() == []


def test_a_task_a_usage_recorded_elsewhere_stopped_suspends_at_the_watched_node(
    tmp_path: Path, watching: Watch
) -> None:
    """A hook's usage (or another task's of its run) spent the budget while
    the model was called: the node's own usage stops nothing, but the task
    waits for a human, so the graph suspends; answered outside the graph,
    it goes on."""
    service, referee = watching(tokens=100)

    def model(state: State) -> dict[str, Any]:
        service.record_usage(
            "t", model=SONNET, input_tokens=150, output_tokens=0, usage_id="hook"
        )
        return {"messages": [anthropic("msg_own", fresh=5, output=5)]}

    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee, model, checkpointer)
        payload = interrupt_of(graph.invoke({"task_id": "t"}, config("a")))
        assert payload["reason"] == "budget_exhausted"
        assert payload["where"] == "spend"
        assert payload["spend"]["tokens"] == 160
        assert [s.session_id for s in service.pending_sessions()] == [
            payload["session_id"]
        ]
        service.raise_budget("t", tokens=1_000, actor="ann", reason="fine")
        service.resume("t", actor="ann", reason="go on")
        result = graph.invoke(None, config("a"))
    assert "__interrupt__" not in result
    assert result["after"] == 1
    assert result["devs"]["outside"] is True
    assert result["devs"]["action"] == "resume"
    assert result["devs"]["spend"]["budget_tokens"] == 1_000  # as raised
    assert [u["usage_id"] for u in usages(service)] == ["hook", "msg_own"]


def test_a_budget_stop_answered_skip_ends_the_graph(
    tmp_path: Path, watching: Watch
) -> None:
    service, referee = watching(tokens=100)
    model = ScriptedChat([{"messages": [anthropic("msg_1", fresh=90, output=20)]}])
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        graph = build(referee, model, checkpointer)
        interrupt_of(graph.invoke({"task_id": "t"}, config("a")))
        result = graph.invoke(
            Command(resume={"action": "skip", "actor": "ann", "reason": "too dear"}),
            config("a"),
        )
    assert "__interrupt__" not in result
    assert result["devs"]["route"] == "end"
    assert result.get("after") is None  # routed to END, not on
    assert service.task("t").state == "SKIPPED"
    assert model.calls == 1


def test_a_message_without_usage_metadata_records_nothing(
    tmp_path: Path, watching: Watch
) -> None:
    service, referee = watching(tokens=1)
    zero = AIMessage(
        "nothing counted",
        id="msg_zero",
        usage_metadata={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
    )
    model = ScriptedChat(
        [{"messages": [AIMessage("no usage", id="msg_plain"), zero], "after": 0}]
    )
    version = service.task("t").version
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        result = build(referee, model, checkpointer).invoke(
            {"task_id": "t", "devs": {"route": "proceed"}}, config("a")
        )
    assert "__interrupt__" not in result
    assert result["after"] == 1
    assert "where" not in result["devs"]  # the watched node wrote nothing
    assert usages(service) == []
    assert service.task("t").version == version
    spend = service.task("t").spend
    assert spend is not None  # the policy's budget, and nothing spent
    assert (spend.tokens, spend.budget_tokens) == (0, 1)


# The checkpointer's serializer warns of the forged values it saves.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_malformed_usage_does_not_break_the_graph_and_what_is_valid_counts(
    tmp_path: Path, watching: Watch
) -> None:
    service, referee = watching()

    def forged(ident: Any, usage: Any, metadata: Any) -> AIMessage:
        message = AIMessage("forged", id="placeholder")
        # assigned past pydantic's validation, as a careless node may
        message.id = ident
        message.usage_metadata = usage
        message.response_metadata = metadata
        return message

    messages = [
        forged(  # only the output is a count
            "msg_1",
            {
                "input_tokens": -5,
                "output_tokens": 40,
                "total_tokens": "x",
                "input_token_details": "nope",
            },
            {"model_name": f"line one\nline\x00two{'x' * 500}"},
        ),
        forged(  # nothing is a count: no usage
            "msg_2",
            {"input_tokens": True, "output_tokens": 7.5, "cache_read": 10**13},
            {"model_name": 42, "model": ["gpt-5"]},
        ),
        forged("msg_3", "garbage", {}),
        forged(  # too large, or negative, cache details: input counts whole
            "id with spaces\n",
            {
                "input_tokens": 70,
                "output_tokens": 10**13,
                "input_token_details": {"cache_read": 10**13, "cache_creation": -1},
            },
            "not a mapping",
        ),
        forged(  # more cache than input: no fresh input
            12345,
            {
                "input_tokens": 5,
                "output_tokens": 1,
                "input_token_details": {"cache_read": 8},
            },
            {"model": "gpt-5"},
        ),
    ]
    model = ScriptedChat([{"messages": messages}])
    with saver(tmp_path / "graph.sqlite") as checkpointer:
        result = build(referee, model, checkpointer).invoke(
            {"task_id": "t"}, config("a")
        )
    assert "__interrupt__" not in result
    assert result["after"] == 1
    recorded = usages(service)
    assert [
        (
            u["input_tokens"],
            u["output_tokens"],
            u["cache_read_tokens"],
            u["cache_creation_tokens"],
        )
        for u in recorded
    ] == [(0, 40, 0, 0), (70, 0, 0, 0), (0, 1, 8, 0)]
    models = [u["model"] for u in recorded]
    assert models[0] == ("line one line two" + "x" * 500)[:200]
    assert models[1:] == ["unknown", "gpt-5"]
    ids = [u["usage_id"] for u in recorded]
    assert ids[0] == "msg_1"
    assert ids[1].startswith("message-")  # hashed: no usage id as it was
    assert ids[2].startswith("langgraph/")  # none: the node's step names it
    assert service.task("t").spend is not None


def test_an_async_node_is_watched_and_given_its_config(tmp_path: Path) -> None:
    service = open_budgeted(tokens=1_000)
    try:
        service.start_task("t")
        referee = Referee(service, test_command=TEST_COMMAND)
        seen: list[str] = []

        async def model(state: State, config: RunnableConfig) -> dict[str, Any]:
            seen.append(config["metadata"]["langgraph_node"])
            return {"messages": [openai("resp_1", prompt=2_000, cached=0, output=1)]}

        async def run() -> tuple[dict[str, Any], dict[str, Any]]:
            async with AsyncSqliteSaver.from_conn_string(
                str(tmp_path / "graph.sqlite")
            ) as checkpointer:
                graph = build(referee, model, checkpointer)
                first = await graph.ainvoke({"task_id": "t"}, config("a"))
                service.raise_budget("t", tokens=10_000, actor="ann", reason="ok")
                answer = {"action": "resume", "actor": "ann", "reason": "go"}
                second = await graph.ainvoke(Command(resume=answer), config("a"))
                return first, second

        first, second = asyncio.run(run())
        assert interrupt_of(first)["reason"] == "budget_exhausted"
        assert "__interrupt__" not in second
        assert second["after"] == 1
        assert seen == ["model"]  # once: the resumed node did not call it again
        assert [u["usage_id"] for u in usages(service)] == ["resp_1"]
        assert service.task("t").state == "RUNNING"
    finally:
        service.close()


def test_watch_takes_a_callable(watching: Watch) -> None:
    _, referee = watching()
    with pytest.raises(InvalidInput) as refused:
        referee.watch("model")  # type: ignore[arg-type]
    assert refused.value.field == "node"
