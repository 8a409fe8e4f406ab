"""Secrets out, before anything is stored: redaction, excerpts and error hashes.

Every text an orchestrator reports passes through :func:`redact` before it
reaches an event, a payload, a log line or the terminal; the error hash is the
SHA-256 of the *redacted* output, stable across runs whose tokens differ. An
agent's output is hostile input and ``re`` backtracks, so each rule opens with
a literal, bounds what may fail and makes unbounded runs possessive: linear
time by construction. docs/security.md lists the rules, the secrets recognised
and what is kept; tests/unit/test_redaction.py holds the corpus.
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import NamedTuple

REDACTED = "[REDACTED]"

# Characters of a token (base64url and friends), and of a word.
_TOKEN = r"A-Za-z0-9_\-"
_WORD = r"A-Za-z0-9"
_JWT_START = _TOKEN
# The separator of an assignment: ``=``, or ``:`` (not ``::``, as in test ids),
# after an optional closing quote of a JSON key.
_ASSIGN = r"[\"']?[ \t]{0,10}+(?:=|:(?!:))[ \t]{0,10}+"
# What may follow a secret word inside a longer name (``token_file``); not a
# dot, so that a path such as ``password_policy.py:42:`` is not an assignment.
_NAME_TAIL = r"[a-z0-9_\-]{0,40}+"
# What is no value (the module docstring): punctuation only, to the end of the
# word (``pass=)``, ``token: ...``), or a key whose own rule below reads what
# follows it (``password: token=x``). Both checks are bounded.
_NO_VALUE = (
    r"(?![^\w\s,;&'\"]{0,64}+(?![^\s,;&])"
    r"|(?:pass(?:(?:w(?:or)?d|phrase)" + _NAME_TAIL + r")?"
    r"|(?:secret|token|credential)" + _NAME_TAIL + ")" + _ASSIGN + ")"
)
# A value after ``name=`` / ``name: ``: a quoted string (to its closing quote
# or the end of the line) or a bare word.
# A value already redacted is taken whole, so that redacting twice changes
# nothing (the rules that read values run on the lower-cased text).
_VALUE = (
    _NO_VALUE
    + r"(?P<secret>"
    + re.escape(REDACTED.lower())
    + r"|\"[^\"\r\n]*+\"?|'[^'\r\n]*+'?|[^\s,;&'\"]++)"
)
# A character of a signature (lower-cased): base64, base64url, CloudFront's
# "~", percent-encoding.
_SIGNATURE = r"[a-z0-9+/=%_~\-]"
# A value on a command line (``-pS3cret``, ``-p 'S3 cret'``): to the next
# blank or shell operator, quoted parts whole; punctuation only is no value.
# A value already redacted is taken alone, as in _VALUE: what a key block's
# redaction left glued to it ("-p[REDACTED]-----END") is not read again.
_ARG = (
    r"(?![^\w\s'\"]{0,64}+(?![^\s;&|<>]))"
    r"(?P<secret>"
    + re.escape(REDACTED)
    + r"|(?:\"[^\"\r\n]*+\"?|'[^'\r\n]*+'?|[^\s;&|<>'\"]++)++)"
)
# The arguments of a command before its ``-p`` (at most 12, each at most 256
# characters, so a failed try is bounded): ``mysql -h db -u root -pS3cret``.
_BEFORE_P = r"(?:[ \t]{1,10}+(?!-p)[^\s;&|<>]{1,256}+){0,12}+[ \t]{1,10}+-p"
# The same before curl's -u, --user or --proxy-user (not --user-agent).
_BEFORE_U = (
    r"(?:[ \t]{1,10}+(?!-u[ \t]|--(?:proxy-)?user[= \t])[^\s;&|<>]{1,256}+){0,12}+"
    r"[ \t]{1,10}+"
)
# Words that name a key (``api_key``, ``AWS_SECRET_ACCESS_KEY``) when they
# stand right before ``key``.
_KEY_WORDS = (
    "api",
    "access",
    "private",
    "account",
    "signing",
    "encryption",
    "master",
    "auth",
    "secret",
    "client",
)


def _after(word: str) -> str:
    """A look-behind that refuses a match glued to a letter or digit before it."""
    return f"(?<![a-z0-9]{re.escape(word)})"


def _single_dash(name: str) -> str:
    """Look-behinds after ``name`` that ask for one dash before it, at the
    start of an argument: ``-storepass``, not ``--storepass`` nor ``-bypass``."""
    word = re.escape(name)
    return f"(?<=-{word})(?<![\\w\\-]-{word})"


def _as_command(name: str) -> str:
    """Look-behinds after ``name`` that ask for it to be a command: at the
    start of the text or after a blank, a quote, a bracket or a shell
    operator, or last in a ``bin/`` path (not ``-I/usr/include/mysql``, nor
    ``test_mysql``)."""
    word = re.escape(name)
    return f"(?:(?<={word})(?<![^\\s(`'\";|&]{word})|(?<=bin/{word}))"


class Rule(NamedTuple):
    """One kind of secret: its pattern, with the part to remove as ``secret``."""

    kind: str
    pattern: re.Pattern[str]
    lowered: bool  # runs on the lower-cased text (a case-insensitive rule)


def _rule(kind: str, pattern: str, *, lowered: bool) -> Rule:
    return Rule(kind, re.compile(pattern), lowered)


# keytool's -storepass, -keypass, -srcstorepass, ...; openssl's -pass, -passin.
# One look-behind first ("-", "e" or "y" before "pass") refuses most "pass"
# of ordinary text at the cost of one.
_DASH_PASS = (
    r"(?<=[\-ey]pass)(?:"
    + "|".join(
        _single_dash(f"{before}pass")
        for before in ("", "store", "key", "srcstore", "deststore", "srckey", "destkey")
    )
    + ")"
)
_KEY_BEFORE = "|".join(
    f"(?<={word}{sep}key)" for word in _KEY_WORDS for sep in ("", "_", "-")
)

RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------- key blocks
    _rule(
        "private key block (PEM, OpenSSH, PGP), with or without its END line",
        # The body runs to the first "-----END" (or the end of the text);
        # "[^-]*+" scans it in one step per run of non-dashes.
        r"-----BEGIN(?P<secret>[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"[^-]*+(?:-(?!----END)[^-]*+)*+"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?)",
        lowered=False,
    ),
    # ---------------------------------------------------------- headers
    *(
        _rule(
            f"{header.title()} header",
            f"{re.escape(header)}{_after(header)}[ \\t]{{0,10}}+:[ \\t]{{0,10}}+"
            r"(?P<secret>[^\s][^\r\n]*+)",
            lowered=True,
        )
        for header in (
            "authorization",  # also Proxy-Authorization
            "cookie",  # also Set-Cookie
            "x-api-key",
            "x-auth-token",
            "x-amz-security-token",
        )
    ),
    *(
        _rule(
            f"{scheme.title()} {what}",
            f"{scheme}{_after(scheme)}[ \\t]{{1,10}}+"
            r"(?P<secret>[a-z0-9._~+/=\-]{8,}+)",
            lowered=True,
        )
        for scheme, what in (("bearer", "token"), ("basic", "auth credentials"))
    ),
    # ---------------------------------------------------------- URLs
    _rule(
        "password in a URL (user:password@host)",
        # Punctuation only is no password (as a value is none, _NO_VALUE):
        # "password://::@" is left whole to the password rule, every time.
        r"://[^\s/@:'\"]{0,256}+:(?![^\w\s/@'\"]{1,256}+@)"
        r"(?P<secret>[^\s/@'\"]{1,256}+)(?=@)",
        lowered=False,
    ),
    _rule(
        "Slack webhook URL",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/"
        r"(?P<secret>[a-z0-9_/\-]++)",
        lowered=True,
    ),
    _rule(
        "Discord webhook URL",
        r"discord(?:app)?\.com/api/webhooks/(?P<secret>[a-z0-9_/\-]++)",
        lowered=True,
    ),
    # ---------------------------------------------------------- assignments
    _rule(
        "command-line flag (--password, --token=, --api-key)",
        r"--(?=[a-z])[a-z0-9\-]{0,30}?"
        r"(?:pass|pwd|secret|token|key|credential)[a-z0-9\-]{0,30}+"
        r"(?:=|[ \t]{1,10}+)" + _VALUE,
        lowered=True,
    ),
    _rule(
        "user:password after -u or --user (curl)",
        # curl's own: "-u" of docker run, sort, git diff or python is not read
        # (docker run -u root:root, sort -u input:1). A password may not start
        # with "/" nor be punctuation only. Lowered text: "-u" stands for
        # "-U" too, curl's --proxy-user.
        "curl"
        + _as_command("curl")
        + _BEFORE_U
        + r"(?:-u[ \t]{1,10}+|--(?:proxy-)?user(?:=|[ \t]{1,10}+))"
        r"(?P<quote>['\"])?"
        r"[^\s:@/'\"]{1,128}+:(?!/)(?![^\w\s'\"]{0,64}+(?![^\s'\"]))"
        r"(?P<secret>" + re.escape(REDACTED.lower()) + r"|"
        r"(?(quote)[^'\"\r\n]++|[^\s'\"]++))",
        lowered=True,
    ),
    _rule(
        "password glued to -p (mysql, mariadb, mysqldump)",
        # Case matters: "-P3306" is the port. "mysql -p" and a blank prompts.
        r"(?:mysql" + _as_command("mysql") + r"[a-z]{0,10}+"
        r"|mariadb" + _as_command("mariadb") + r"(?:-[a-z]{1,10}+)?)"
        r"" + _BEFORE_P + _ARG,
        lowered=False,
    ),
    _rule(
        "password after -p of sshpass",
        # Only sshpass's own options come before its -p: the command it runs
        # (ssh -p 22) is not read.
        "sshpass"
        + _as_command("sshpass")
        + r"(?:[ \t]{1,10}+-(?!p)[^\s;&|<>]{0,64}+){0,4}+[ \t]{1,10}+-p[ \t]{0,10}+"
        + _ARG,
        lowered=False,
    ),
    _rule(
        "password after -p of a registry or cloud login (docker login, az login)",
        r"login(?:"
        + "|".join(
            _as_command(f"{tool} login")
            for tool in (
                "docker",
                "podman",
                "buildah",
                "skopeo",
                "nerdctl",
                "oras",
                "helm registry",
                "az",
                "oc",
                "cf",
            )
        )
        + r")"
        + _BEFORE_P
        + r"(?:=|[ \t]{1,10}+)?"
        + _ARG,
        lowered=False,
    ),
    _rule(
        "password assignment (password=, passwd:, passphrase=, pass=, -password)",
        # A bare "pass" counts only right before its separator, and not at
        # the end of a longer word (bypass=1): "passed: 3" is not a password.
        # A single-dash flag takes its value after a blank too: "-password x",
        # keytool's "-storepass x", openssl's "-passin pass:x".
        r"pass(?:(?:(?:w(?:or)?d|phrase)" + _NAME_TAIL + "|" + _after("pass") + ")"
        r"" + _ASSIGN + "|(?:" + _DASH_PASS + r")(?:w(?:or)?d|phrase|in|out)?"
        r"(?:=|[ \t]{1,10}+))" + _VALUE,
        lowered=True,
    ),
    *(
        _rule(
            f"{word} assignment ({word}=, {word}: ...{dash})",
            re.escape(word)
            + also
            + r"(?:"
            + _NAME_TAIL
            + _ASSIGN
            + (f"|{_single_dash(word)}[ \\t]{{1,10}}+" if dash else "")
            + ")"
            + _VALUE,
            lowered=True,
        )
        for word, also, dash in (
            # PWD and OLDPWD set to a path (or to $PWD) are working
            # directories; a pwd after "_" or "-" (DB_PWD, MYSQL_PWD) is a
            # password, whatever its value.
            (
                "pwd",
                r"(?:(?<=[_\-]pwd)|(?!" + _ASSIGN + r"(?:[/~$]|[a-z]:[\\/])))",
                "",
            ),
            ("secret", "", ", -secret"),  # -secret x, -token x: Go's flags
            ("token", "", ", -token"),
            ("credential", "", ""),
        )
    ),
    _rule(
        "signed-URL signature (sig=, signature=, X-Amz-Signature=)",
        # Query parameters of signed URLs (Azure SAS, S3, GCS, CloudFront,
        # OAuth 1): the signature is what grants access. Not "sign=" nor
        # "signature = f(x)" in code; "signature": in JSON. The value must
        # look like one: at least 16 characters of base64, base64url, hex or
        # percent-encoding, not punctuation only (checked on those 16: rule
        # 2), so "sig=None", "sig=0" and "sig=='x'" are code, not secrets.
        r"sig" + _after("sig") + r"(?:nature)?"
        r"(?:=(?!=)|(?<=signature)[\"'][ \t]{0,10}+:[ \t]{0,10}+)"
        r"(?=[\"']?" + _SIGNATURE + r"{16})(?=[\"']?[+/=%_~\-]{0,15}+[a-z0-9])"
        r"(?P<secret>\"[^\"\r\n]*+\"?|'[^'\r\n]*+'?|[^\s,;&'\"]++)",
        lowered=True,
    ),
    _rule(
        "session id assignment",
        r"session[_\-]?(?:id|key|token)" + _NAME_TAIL + _ASSIGN + _VALUE,
        lowered=True,
    ),
    _rule(
        "key assignment (api_key=, access-key:, X_PRIVATE_KEY=, AccountKey=)",
        r"key(?:" + _KEY_BEFORE + ")" + _NAME_TAIL + _ASSIGN + _VALUE,
        lowered=True,
    ),
    # ---------------------------------------------------------- token shapes
    # AWS access key ids, also glued to a word ("keyAKIA...").
    _rule(
        "AWS access key id (AKIA, ASIA, ...)",
        r"(?P<secret>A(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|BIA|CCA)[A-Z0-9]{16})",
        lowered=False,
    ),
    # The others must not start inside a word or a number ("task-0123..." is no
    # "sk-" key). Each ends with a possessive run that cannot fail once long
    # enough (rule 3); the JWT, whose first run is followed by a ".", starts
    # only where a run of token characters starts.
    *(
        _rule(
            kind,
            f"(?P<secret>{prefix}(?<![{_JWT_START if prefix == 'eyJ' else _WORD}]"
            f"{prefix}){rest})",
            lowered=False,
        )
        for kind, prefix, rest in (
            (
                "GitHub token (ghp_, gho_, ghu_, ghs_, ghr_)",
                "gh",
                r"[pousr]_[A-Za-z0-9]{20,}+",
            ),
            ("GitHub fine-grained token", "github_pat_", r"[A-Za-z0-9_]{20,}+"),
            ("GitLab token", "glpat-", r"[A-Za-z0-9_\-]{20,}+"),
            (
                "Slack token (xoxb-, xoxp-, ...)",
                "xox",
                r"[abposre]-[A-Za-z0-9\-]{10,}+",
            ),
            ("Slack app token", "xapp-", r"[A-Za-z0-9\-]{10,}+"),
            (
                "Stripe secret key",
                "sk_",
                r"(?:live|test)_[A-Za-z0-9]{10,}+",
            ),
            ("Stripe restricted key", "rk_", r"(?:live|test)_[A-Za-z0-9]{10,}+"),
            ("Stripe webhook secret", "whsec_", r"[A-Za-z0-9]{10,}+"),
            (
                "OpenAI / Anthropic style key (sk-, sk-proj-, sk-ant-)",
                "sk-",
                r"(?:proj-|ant-|svcacct-|admin-|live-|test-)?[A-Za-z0-9_\-]{16,}+",
            ),
            ("Google API key", "AIza", r"[0-9A-Za-z_\-]{35}"),
            ("devs operator token", "devs_op_", r"[A-Za-z0-9_\-]{20,}+"),
            ("npm token", "npm_", r"[A-Za-z0-9]{36}"),
            ("Hugging Face token", "hf_", r"[A-Za-z0-9]{30,}+"),
            (
                "JSON Web Token",
                "eyJ",
                rf"[{_TOKEN}]{{8,}}+\.[{_TOKEN}]{{8,}}+\.[{_TOKEN}]{{8,}}+",
            ),
        )
    ),
)
"""Every kind of secret :func:`redact` removes, in the order they are tried."""

# str.lower() keeps the length of almost every text; where it does not (a few
# letters such as U+0130 lower to two characters), only ASCII is lowered.
_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _lowered(text: str) -> str:
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = text.translate(_ASCII_LOWER)
    return lowered


# Every rule starts with one of these (lower-cased: "akia" stands for AKIA),
# factored by first character so that a miss costs little. Short texts, the
# most common, are checked for them with one search first: trying every rule
# costs about 20 us even on an empty string. tests/unit/test_redaction.py
# checks that no rule can match where this finds nothing.
_STARTS = re.compile(
    r"--|://|a(?:uthorization|kia|sia|gpa|ida|roa|ipa|npa|nva|bia|cca|iza)"
    r"|b(?:earer|asic)|c(?:ookie|redential|url)"
    r"|x(?:-a(?:pi-key|uth-token|mz-security-token)|ox|app-)"
    r"|hooks\.slack\.com|hf_|d(?:iscord|evs_op_)|p(?:ass|wd)"
    r"|s(?:e(?:cret|ssion)|k[_\-]|ig)|m(?:ysql|ariadb)|login"
    r"|token|key|g(?:h|ithub_pat_|lpat-)|rk_|whsec_|npm_|eyj"
)
_SHORT = 512


def _secret_spans(text: str, *, quick: bool = True) -> list[tuple[int, int]]:
    lowered = _lowered(text)
    if quick and len(text) <= _SHORT and not _STARTS.search(lowered):
        return []
    spans: list[tuple[int, int]] = []
    for rule in RULES:
        subject = lowered if rule.lowered else text
        spans.extend(match.span("secret") for match in rule.pattern.finditer(subject))
    return spans


# Short texts found clean (no rule matches: redact returns them as they are,
# secret_kind finds nothing). The same ids, gate names and errors come back
# command after command, and a task id such as "task-7" holds a start ("sk-"),
# so each check would try every rule. Only clean texts are kept, so no secret
# stays here; the memory is emptied when full.
_CLEAN: dict[str, None] = {}
_CLEAN_MAX = 4_096

# Longer texts found clean, up to _LONG characters, a few of them: a long
# text skips the quick check, so each check tries every rule (about 55 us for
# 2,000 characters), and the same one comes back (an agent asks whether the
# same candidate strategy is blacklisted, again and again). At most
# _CLEAN_LONG_MAX * _LONG characters are held; emptied when full.
_CLEAN_LONG: dict[str, None] = {}
_CLEAN_LONG_MAX = 64
_LONG = 16_384


def _known_clean(text: str) -> bool:
    """Whether ``text`` (exactly a str) was found clean and is remembered."""
    if len(text) <= _SHORT:
        return text in _CLEAN
    return len(text) <= _LONG and text in _CLEAN_LONG


def _remember_clean(text: str) -> None:
    if len(text) <= _SHORT:
        memory, limit = _CLEAN, _CLEAN_MAX
    elif len(text) <= _LONG:
        memory, limit = _CLEAN_LONG, _CLEAN_LONG_MAX
    else:
        return
    if len(memory) >= limit:
        memory.clear()
    memory[text] = None


def redact(text: str) -> str:
    """Return ``text`` with every secret-looking substring replaced.

    Idempotent, and linear in ``len(text)`` (see the module docstring).
    """
    exact = type(text) is str  # a subclass may compare equal to what it is not
    if exact and _known_clean(text):
        return text
    spans = _secret_spans(text)
    if not spans:
        if exact:
            _remember_clean(text)
        return text
    spans.sort()
    parts: list[str] = []
    done = 0
    start, end = spans[0]
    for next_start, next_end in spans[1:]:
        if next_start <= end:  # overlapping or touching: one redaction
            end = max(end, next_end)
            continue
        parts += (text[done:start], REDACTED)
        done = end
        start, end = next_start, next_end
    parts += (text[done:start], REDACTED, text[end:])
    return "".join(parts)


def secret_kind(text: str) -> str | None:
    """The kind of the first secret in ``text`` (a :class:`Rule`'s ``kind``).

    For identifiers (task ids, run ids, node names, actors), which are refused
    rather than rewritten: a redacted id would no longer name its task.
    """
    exact = type(text) is str  # a subclass may compare equal to what it is not
    if exact and _known_clean(text):
        return None
    lowered = _lowered(text)
    short = len(text) <= _SHORT
    if short and not _STARTS.search(lowered):
        return None  # the quick check of _secret_spans: no rule can match
    for rule in RULES:
        if rule.pattern.search(lowered if rule.lowered else text):
            return rule.kind
    if exact:
        _remember_clean(text)
    return None


def error_hash(redacted_output: str) -> str:
    """SHA-256 hex digest of an output that :func:`redact` has already cleaned."""
    if len(redacted_output) <= _SHORT and type(redacted_output) is str:
        return _short_error_hash(redacted_output)  # the same error, again and again
    return _sha256(redacted_output)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_short_error_hash = functools.lru_cache(maxsize=1_024)(_sha256)


def excerpt(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text`` (the end of a log says most)."""
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :]
