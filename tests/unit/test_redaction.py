"""Secrets never reach an event, a payload or a log line."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devs.domain import InvalidInput
from devs.domain.redaction import (
    REDACTED,
    RULES,
    Rule,
    error_hash,
    excerpt,
    redact,
    secret_kind,
)
from devs.domain.values import TaskId, validated
from tests.corpus import (
    CREDENTIAL_FORMS,
    HOSTILE_HARMLESS,
    HOSTILE_UNITS,
    NOT_CREDENTIALS,
    ORDINARY,
    SECRETS,
    hostile,
    runner_output,
)


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secret_is_redacted(text: str, secret: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_survives_verbatim(text: str) -> None:
    assert redact(text) == text
    assert secret_kind(text) is None


def test_every_rule_is_exercised_by_the_corpus() -> None:
    """A rule no corpus secret needs is either dead or untested."""
    for rule in RULES:
        subjects = [text.lower() if rule.lowered else text for text, _ in SECRETS]
        assert any(rule.pattern.search(text) for text in subjects), rule.kind


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secret_kind_names_what_was_found(text: str, secret: str) -> None:
    kind = secret_kind(text)
    assert kind in {rule.kind for rule in RULES}
    assert secret not in kind


def test_what_names_the_secret_is_kept() -> None:
    assert redact("Authorization: Bearer abcdefgh123") == f"Authorization: {REDACTED}"
    assert redact("x DB_PASSWORD=hunter2; y") == f"x DB_PASSWORD={REDACTED}; y"
    assert redact("--token abc123 --verbose") == f"--token {REDACTED} --verbose"
    assert (
        redact("https://hooks.slack.com/services/T0/B0/XYZ")
        == f"https://hooks.slack.com/services/{REDACTED}"
    )


@pytest.mark.parametrize(("text", "secret", "kept"), CREDENTIAL_FORMS)
def test_credentials_in_common_forms_lose_the_secret_only(
    text: str, secret: str, kept: str
) -> None:
    """curl -u, mysql -p, docker login -p, sshpass -p, -password, signed URLs:
    the secret goes, what names it (the flag, the user, the parameter) and
    the rest of the command stay readable."""
    assert redact(text) == kept
    assert secret not in kept
    assert secret_kind(text) is not None


@pytest.mark.parametrize("text", NOT_CREDENTIALS)
def test_look_alikes_of_the_common_forms_are_kept(text: str) -> None:
    """ssh -p 22, pytest -p no:cacheprovider, mysql -P3306, curl -u without a
    password, docker run -u 1000:1000 (and root:root), sort -u input:1,
    ?page=2, sign=, sig=None, PWD=/..."""
    assert redact(text) == text
    assert secret_kind(text) is None


def test_minus_p_is_a_password_only_where_the_tool_says_so() -> None:
    password = "S3" + "cretPw"
    for text in (
        f"mysql -u root -p{password} shop",
        f"mariadb-dump -p{password} shop",
        f"sshpass -p {password} ssh -p 22 host",
        f"docker login -u bob -p {password} registry.example.com",
        f"helm registry login r.example.com -u bob -p {password}",
    ):
        assert password not in redact(text), text
    for text in (
        f"ssh -p{password} host",  # any other tool: not read
        f"mysql -P{password} -h db",  # -P is mysql's port
        f"mysql -p {password}",  # a blank after -p: mysql prompts
        f"gcc -I/usr/include/mysql -p{password}",  # mysql is no command here
        f"test_mysql -p{password}",
        f"pytest -k login -p {password}",  # login alone is no login command
        f"sshpass -f file ssh -p {password} host",  # ssh's -p, after sshpass's
    ):
        assert redact(text) == text, text


def test_minus_u_is_a_password_only_after_curl() -> None:
    """curl's -u, --user and --proxy-user (-U) hold user:password; the -u of
    docker run (a user:group), sort, git diff or python does not."""
    password = "S3" + "cretPw"
    for text in (
        f"curl -u admin:{password} https://api.example.com",
        f"curl -sS -H 'Accept: application/json' --user=ci:{password} https://a",
        f"/usr/bin/curl --user-agent ua:1.0 -u bob:{password} https://a",
        f"curl -x proxy:3128 -U bob:{password} https://a",  # -U: --proxy-user
        f"echo $(curl -fsS -u bob:{password} https://a)",
        f"curl -u 1000:{password[2:]}1 https://a",  # digits are a password too
    ):
        assert password[2:] not in redact(text), text
        assert secret_kind(text) == "user:password after -u or --user (curl)", text
    for text in (
        "docker run --rm -u root:root alpine id",
        "docker run -u www-data:www-data nginx",
        "docker run --user postgres:postgres postgres:16",
        "podman run --user 1000:1000 alpine",
        "git diff -u a:b",
        "sort -u input:1",
        "python -u app.py:12: DeprecationWarning",
        "sudo -u postgres psql -c 'select 1' | curl -s https://a",
        f"libcurl -u bob:{password}",  # curl is no command here
        f"test_curl -u bob:{password}",
        "curl --user-agent ua:1.0 https://a",
    ):
        assert redact(text) == text, text
        assert secret_kind(text) is None, text


def test_a_signature_must_look_like_one() -> None:
    """sig= and signature= take a value of 16 characters or more of base64,
    base64url, hex or percent-encoding; None, a number, a comparison or a
    call in code stays."""
    hex_signature = "3f2a9c" + "0b1d" * 15  # 66 hex digits
    for text, kept in (
        ("sig=Xy9%2Bab0pQrStUvWx%3D&sp=r", f"sig={REDACTED}&sp=r"),
        (f"X-Amz-Signature={hex_signature}", f"X-Amz-Signature={REDACTED}"),
        (f"&Signature={hex_signature[:16]} 403", f"&Signature={REDACTED} 403"),
        ('"signature": "q1Zx+k9LmN/0pQrStUv="', f'"signature": {REDACTED}'),
        ("sig='Nql641NHEUkUaXQH~ZINK1FZ'", f"sig={REDACTED}"),
    ):
        assert redact(text) == kept, text
    for text in (
        "sig=None",
        "sig=0",
        "sig=12345",
        "assert sig=='x'",
        "assert sig=='Xy9%2Bab0pQrStUvWx'",  # a comparison, not a parameter
        "sig='x'",
        'signature="abc"',
        "signature=None signature=0",
        "sig=inspect.signature(fn)",
        f"&Signature={hex_signature[:15]} 403",  # 15 characters: too short
        "sig=----------------",  # punctuation only
    ):
        assert redact(text) == text, text
        assert secret_kind(text) is None, text


def test_the_words_between_a_command_and_its_p_are_bounded() -> None:
    """At most 12 words are read between mysql (or a login) and its -p, so a
    failed try costs a bounded amount; a 13th is beyond the window."""
    password = "S3" + "cretPw"
    near = "mysql " + "-v " * 12 + f"-p{password}"
    far = "mysql " + "-v " * 13 + f"-p{password}"
    assert password not in redact(near)
    assert redact(far) == far


def test_pwd_and_oldpwd_are_working_directories() -> None:
    """PWD=/... and OLDPWD=/... are kept; DB_PWD, MYSQL_PWD (whatever their
    value) and an ODBC Pwd= are passwords, and so is PWD set to something
    else than a path."""
    env = "PWD=/home/x/proj\nOLDPWD=/home/x\nPWD=~/proj\nOLDPWD=C:\\x\nPWD=$PWD"
    assert redact(env) == env
    assert secret_kind(env) is None
    password = "S3" + "cretPw"
    for name in ("DB_PWD", "MYSQL_PWD", "db-pwd", "mysqlpwd", "Pwd", "PWD", "OLDPWD"):
        assert redact(f"{name}={password}") == f"{name}={REDACTED}", name
    assert redact(f"MYSQL_PWD=/{password}") == f"MYSQL_PWD={REDACTED}"
    assert redact(f"uid=sa;Pwd={password};") == f"uid=sa;Pwd={REDACTED};"
    cut = "/home/user/pPWD=/home/user/project"  # a line cut, then another
    assert redact(cut) == cut


@pytest.mark.parametrize(
    "text",
    [
        "password=, passwd:, passphrase=, pass=)",
        "token: ...",
        "secret=-- and key: api_key=)",
        "password: ***",
        "password:",
        "pass=",
    ],
)
def test_a_key_without_a_value_is_no_secret(text: str) -> None:
    assert redact(text) == text


def test_a_key_followed_by_another_key_leaves_that_keys_value_to_its_rule() -> None:
    secret = "S3" + "cretPw"
    assert redact(f"password: token={secret}") == f"password: token={REDACTED}"
    assert redact(f"passwd= secret: {secret}") == f"passwd= secret: {REDACTED}"
    assert redact(f"-passin pass:{secret}") == f"-passin pass:{REDACTED}"
    # A value that only looks like a key is still a secret.
    assert redact(f"password={secret}=") == f"password={REDACTED}"
    assert redact(f"password=key:{secret}") == f"password={REDACTED}"


@pytest.mark.parametrize(
    "text",
    [
        "password://::@",  # the URL rule leaves a punctuation password alone
        "docker login -u -p:)",
        "curl -u -p:)",  # so does curl's -u
        "mysql -p) -p:x",
        "pass=-u a:) x",
        "pass=curl -u a:) x",
    ],
)
def test_skipped_punctuation_stays_skipped_when_redacted_again(text: str) -> None:
    """Found by hypothesis: where one rule skips a value of punctuation only,
    no other rule may redact part of it, or the second pass would see
    [REDACTED] there, a value, and redact more."""
    once = redact(text)
    assert redact(once) == once


@pytest.mark.parametrize(
    "text",
    [
        "CURL -U 0:-----BEGINPRIVATE KEY----------END",
        "mysql -p-----BEGINPRIVATE KEY----------END",
        "sshpass -p -----BEGINPRIVATE KEY----------END",
        "docker login -p -----BEGINPRIVATE KEY----------END",
    ],
)
def test_a_command_line_value_glued_to_a_redaction_stays_put(text: str) -> None:
    """Found by hypothesis: a key block without its END line is removed up to
    a "-----END" glued to it; read again, the redacted value is taken alone,
    not with what follows it."""
    once = redact(text)
    assert REDACTED in once
    assert redact(once) == once


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.kind)
def test_a_refusal_naming_a_kind_reads_back_whole(rule: Rule) -> None:
    """An id holding a credential is refused with a message naming the
    rule's kind; errors are redacted when made, and the kind (with its
    examples, "password=, passwd:, pass=") must come through unmangled."""
    refused = validated(_start)
    text = MINIMAL[rule.kind]
    with pytest.raises(InvalidInput) as error:
        refused(text)
    message = str(error.value)
    assert f"({secret_kind(text)})" in message
    assert redact(message) == message
    for kind in (rule.kind, f"holds a credential ({rule.kind}); ids are"):
        assert redact(kind) == kind
        assert secret_kind(kind) is None


def _start(task_id: TaskId) -> str:
    return task_id


def test_a_private_key_block_goes_whole_and_the_rest_stays() -> None:
    text = (
        "before\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE-IBx\n"
        "-----END EC PRIVATE KEY-----\nafter"
    )
    assert redact(text) == f"before\n-----BEGIN{REDACTED}\nafter"


def test_a_truncated_private_key_block_is_removed_to_the_end() -> None:
    text = "log\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    assert redact(text) == f"log\n-----BEGIN{REDACTED}"


def test_secrets_next_to_each_other_are_each_redacted() -> None:
    text = "password=a password=b"
    assert redact(text) == f"password={REDACTED} password={REDACTED}"


@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_hostile_text_is_redacted_idempotently(unit: str) -> None:
    """Each hostile text (timed in bench/bench.py) redacts to a fixed point."""
    once = redact(hostile(unit))
    assert redact(once) == once


@pytest.mark.parametrize("unit", HOSTILE_HARMLESS)
def test_hostile_text_without_a_secret_comes_back_as_is(unit: str) -> None:
    text = hostile(unit)
    assert redact(text) == text


def test_hostile_text_of_secrets_loses_every_one() -> None:
    assert set(redact(hostile("AKIA", 200)).split(REDACTED)) == {""}
    assert redact(hostile("Authorization: ", 200)) == f"Authorization: {REDACTED}"


def test_secrets_buried_in_long_output_are_found() -> None:
    noise = runner_output(200_000)
    for text, _ in SECRETS:
        cleaned = redact(noise + "\n" + text + "\n" + noise)
        if "PRIVATE KEY" in text and "-----END" not in text:
            # A block without its END line runs to the end of the text.
            assert cleaned == noise + "\n" + redact(text + "\n" + noise)
        else:
            assert cleaned == noise + "\n" + redact(text) + "\n" + noise


FRAGMENTS = st.sampled_from(
    [
        "password",
        "pass",
        "token",
        "api_key",
        "Authorization",
        "Bearer ",
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "://",
        "@",
        ":",
        "::",
        "=",
        '"',
        "'",
        " ",
        "\n",
        "-",
        "--",
        "AKIA",
        "ghp_",
        "eyJ",
        ".",
        "abcdefgh",
        "0123456789",
        "ABCDEFGHIJKLMNOP",
        REDACTED,
        "\u0130",  # lowers to two characters
        # The command-line and signed-URL rules' pieces.
        "mysql",
        "sshpass",
        "docker login",
        "-p",
        "-P",
        "-u",
        "--user",
        "curl",
        "curl -u ",
        "None",
        "==",
        "Xy9%2Bab0pQrStUv",
        "-password",
        "a:",
        "sig",
        "nature",
        "PWD",
        "old",
        "/",
        "1:1",
        ")",
        "...",
        ",",
    ]
)


@given(st.one_of(st.text(max_size=200), st.lists(FRAGMENTS, max_size=30).map("".join)))
def test_redaction_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


# For each rule, the shortest text it redacts, holding no other rule's start.
MINIMAL = {
    "private key block (PEM, OpenSSH, PGP), with or without its END line": (
        "-----BEGIN PRIVATE KEY-----0"
    ),
    "Authorization header": "authorization: 0",
    "Cookie header": "cookie: 0",
    "X-Api-Key header": "x-api-key: 0",
    "X-Auth-Token header": "x-auth-token: 0",
    "X-Amz-Security-Token header": "x-amz-security-token: 0",
    "Bearer token": "bearer 00000000",
    "Basic auth credentials": "basic 00000000",
    "password in a URL (user:password@host)": "://:0@",
    "Slack webhook URL": "hooks.slack.com/services/0",
    "Discord webhook URL": "discord.com/api/webhooks/0",
    "command-line flag (--password, --token=, --api-key)": "--pwd 0",
    "user:password after -u or --user (curl)": "curl -u a:0",
    "password glued to -p (mysql, mariadb, mysqldump)": "mysql -p0",
    "password after -p of sshpass": "sshpass -p0",
    "password after -p of a registry or cloud login (docker login, az login)": (
        "oc login -p0"
    ),
    "password assignment (password=, passwd:, passphrase=, pass=, -password)": (
        "pass=0"
    ),
    "pwd assignment (pwd=, pwd: ...)": "pwd=0",
    "secret assignment (secret=, secret: ..., -secret)": "secret=0",
    "token assignment (token=, token: ..., -token)": "token=0",
    "credential assignment (credential=, credential: ...)": "credential=0",
    "signed-URL signature (sig=, signature=, X-Amz-Signature=)": "sig=" + "0" * 16,
    "session id assignment": "sessionid=0",
    "key assignment (api_key=, access-key:, X_PRIVATE_KEY=, AccountKey=)": "apikey=0",
    "AWS access key id (AKIA, ASIA, ...)": "AKIA" + "0" * 16,
    "GitHub token (ghp_, gho_, ghu_, ghs_, ghr_)": "ghp_" + "0" * 20,
    "GitHub fine-grained token": "github_pat_" + "0" * 20,
    "GitLab token": "glpat-" + "0" * 20,
    "Slack token (xoxb-, xoxp-, ...)": "xoxb-" + "0" * 10,
    "Slack app token": "xapp-" + "0" * 10,
    "Stripe secret key": "sk_live_" + "0" * 10,
    "Stripe restricted key": "rk_live_" + "0" * 10,
    "Stripe webhook secret": "whsec_" + "0" * 10,
    "OpenAI / Anthropic style key (sk-, sk-proj-, sk-ant-)": "sk-" + "0" * 16,
    "Google API key": "AIza" + "0" * 35,
    "devs operator token": "devs_op_" + "0" * 20,
    "npm token": "npm_" + "0" * 36,
    "Hugging Face token": "hf_" + "0" * 30,
    "JSON Web Token": "eyJ" + "0" * 8 + "." + "0" * 8 + "." + "0" * 8,
}


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.kind)
def test_each_rule_redacts_its_shortest_example(rule: Rule) -> None:
    text = MINIMAL[rule.kind]
    assert rule.pattern.search(text.lower() if rule.lowered else text)
    assert redact(text) != text  # also through the quick check


@given(
    st.one_of(
        st.lists(FRAGMENTS, max_size=30).map("".join),
        st.sampled_from(SECRETS).map(lambda case: case[0]),
        st.text(max_size=100),
    )
)
def test_the_quick_check_never_hides_a_secret(text: str) -> None:
    """Short texts skip the rules when none of their starts is in the text."""
    from devs.domain import redaction

    full = redaction._secret_spans(text, quick=False)
    assert redaction._secret_spans(text) == full
    if full:
        assert redaction._STARTS.search(text.lower())
    lowered = redaction._lowered(text)  # as secret_kind lowers it
    first = next(
        (
            rule.kind
            for rule in RULES
            if rule.pattern.search(lowered if rule.lowered else text)
        ),
        None,
    )
    assert secret_kind(text) == first  # secret_kind takes the quick check too


def test_clean_texts_only_are_remembered() -> None:
    """redact and secret_kind remember short texts they found clean, and
    answer the same for them from memory; a secret is never remembered."""
    from devs.domain import redaction

    for check in (secret_kind, redact):
        redaction._CLEAN.clear()
        clean = "task-7 failed"  # holds a start ("sk-") but no secret
        answer = check(clean)
        assert clean in redaction._CLEAN
        assert check(clean) == answer
        for text, secret in SECRETS:
            first = check(text)
            assert check(text) == first
            assert not any(secret in remembered for remembered in redaction._CLEAN)
        long = "task-7 " * 100  # longer than _SHORT: checked, not kept
        check(long)
        assert long not in redaction._CLEAN
        for i in range(redaction._CLEAN_MAX + 1):
            check(f"task-{i}")
        assert len(redaction._CLEAN) <= redaction._CLEAN_MAX
    assert secret_kind("task-7 failed") is None
    assert redact("task-7 failed") == "task-7 failed"


def test_long_clean_texts_are_remembered_a_few_at_a_time() -> None:
    """A text longer than the short ones, up to _LONG characters, found clean
    is remembered (a few of them): the same answer from memory; one holding a
    secret never is, nor one longer than _LONG."""
    from devs.domain import redaction

    for check in (secret_kind, redact):
        redaction._CLEAN_LONG.clear()
        long = "task-7 " * 100  # 700 characters, clean
        answer = check(long)
        assert long in redaction._CLEAN_LONG
        assert long not in redaction._CLEAN
        assert check(long) == answer
        for text, secret in SECRETS:
            padded = long + " " + text
            first = check(padded)
            assert check(padded) == first
            assert padded not in redaction._CLEAN_LONG
            assert not any(secret in kept for kept in redaction._CLEAN_LONG)
        longest = "x" * (redaction._LONG + 1)
        check(longest)
        assert longest not in redaction._CLEAN_LONG
        for i in range(redaction._CLEAN_LONG_MAX + 1):
            check(f"{i:04} " + long)
        assert len(redaction._CLEAN_LONG) <= redaction._CLEAN_LONG_MAX
    assert secret_kind("task-7 " * 100) is None
    assert redact("task-7 " * 100) == "task-7 " * 100
    secret = "task-7 " * 100 + " api_key=" + "a1B2" * 20
    assert redaction._known_clean(secret) is False
    assert redact(secret) == "task-7 " * 100 + " api_key=" + redaction.REDACTED
    assert secret_kind(secret) is not None


@given(st.lists(FRAGMENTS, max_size=30).map("".join), st.sampled_from(SECRETS))
def test_a_secret_is_found_whatever_surrounds_it(
    prefix: str, case: tuple[str, str]
) -> None:
    text, secret = case
    assert secret not in redact(prefix + "\n" + text + "\n")


def test_error_hash_is_sha256_hex() -> None:
    digest = error_hash("Traceback")
    assert digest == hashlib.sha256(b"Traceback").hexdigest()
    assert len(digest) == 64
    assert all(c in "0123456789abcdef" for c in digest)


@given(st.one_of(st.text(max_size=600), st.sampled_from(["", "x" * 513])))
def test_error_hash_of_any_text_is_its_sha256(text: str) -> None:
    """Short texts' hashes are remembered: the same digest, first time or not."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    assert error_hash(text) == digest
    assert error_hash(text) == digest


def test_error_hash_survives_lone_surrogates() -> None:
    assert len(error_hash("bad \ud800 byte")) == 64


def test_excerpt_keeps_the_end() -> None:
    assert excerpt("abc", 10) == "abc"
    cut = excerpt("x" * 50 + "END", 10)
    assert len(cut) == 10
    assert cut.endswith("END")
    assert cut.startswith("…")
