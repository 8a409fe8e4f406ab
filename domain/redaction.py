"""Secrets out, before anything is stored: redaction, excerpts and error hashes.

Every text an orchestrator reports (strategies, error messages, command output,
reasons) passes through :func:`redact` before it reaches an event, a payload or a
log line. The error hash is the SHA-256 of the *redacted* output, so it is stable
across runs whose tokens differ and reveals nothing about a secret.
"""

from __future__ import annotations

import hashlib
import re

REDACTED = "[REDACTED]"

# Order matters: whole-token patterns first, then key/value shapes.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # PEM private keys, whole block.
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
            r".*?-----END [A-Z0-9 ]*PRIVATE KEY-----",
            re.DOTALL,
        ),
        REDACTED,
    ),
    # Authorization headers and bearer/basic credentials.
    (
        re.compile(
            r"(?i)\b(authorization\s*[:=]\s*)(?:bearer|basic|token)?\s*[^\s'\"]+"
        ),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    # Connection strings: keep scheme, user and host, drop the password.
    (
        re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@'\"]*):[^\s@/'\"]+@"),
        r"\1:" + REDACTED + "@",
    ),
    # Well-known token shapes.
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"), REDACTED),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}\b"), REDACTED),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b"), REDACTED),
    (re.compile(r"\bsk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{16,}\b"), REDACTED),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"), REDACTED),
    (
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        REDACTED,
    ),
    # key=value / key: value where the key names a secret.
    (
        re.compile(
            r"(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key"
            r"|access[_-]?key|private[_-]?key|client[_-]?secret|credentials?)"
            r"[A-Za-z0-9_.-]*[\"']?\s*[:=]\s*)(?:\"[^\"]*\"|'[^']*'|[^\s,;&'\"]+)"
        ),
        r"\1" + REDACTED,
    ),
)


# Every pattern above needs one of these literals; text with none of them has
# nothing to redact, and one scan for them is far cheaper than thirteen.
_ANCHORS = re.compile(
    r"(?i:authorization|bearer|basic|://|passw|pwd|secret|token|api[_-]?key"
    r"|access[_-]?key|private[_-]?key|credential)"
    r"|-----BEGIN|AKIA|gh[pousr]_|github_pat_|glpat-|sk-|xox[abposr]-|AIza|eyJ"
)


def redact(text: str) -> str:
    """Return ``text`` with every secret-looking substring replaced."""
    if not _ANCHORS.search(text):
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def error_hash(redacted_output: str) -> str:
    """SHA-256 hex digest of an output that :func:`redact` has already cleaned."""
    return hashlib.sha256(redacted_output.encode("utf-8", "surrogatepass")).hexdigest()


def excerpt(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text`` (the end of a log says most)."""
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :]
