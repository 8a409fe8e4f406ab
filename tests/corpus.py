"""Texts for the redaction tests: secrets that must go, text that must stay,
and hostile texts that must not slow redaction down.

Each secret is a pair (text as an agent would print it, the secret in it). The
secrets are made up but shaped like the real thing; the "must stay" strings
are what test-runner output is full of.
"""

from __future__ import annotations

from devs.domain.redaction import REDACTED

# Pieces are joined at run time so that no complete credential sits in the
# repository as one literal (secret scanners would flag this file).
_AWS = "AKIA" + "IOSFODNN7EXAMPLE"
_ASIA = "ASIA" + "Y34FZKBOKMUTVV7A"
_GHP = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"
_PEM_BODY = "MIIEowIBAAKCAQEAx7yDmxFsY9hKq2bH3cN0aWd1"

SECRETS: list[tuple[str, str]] = [
    # Cloud keys: AWS key ids (AKIA, ASIA), also glued to a word.
    (f"key {_AWS} in use", _AWS),
    (f"temporary {_ASIA} from STS", _ASIA),
    (f"keyAKIA{_AWS[4:]}", _AWS[4:]),
    (
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    ),
    ("export AWS_SECRET_ACCESS_KEY=Zm9vYmFyYmF6cXV4", "Zm9vYmFyYmF6cXV4"),
    # GitHub, GitLab.
    (f"export GITHUB_TOKEN={_GHP}", _GHP),
    (f"remote: {_GHP} rejected", _GHP),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_pat_11ABC"),
    ("glpat-abcdefghij0123456789", "glpat-abcdefghij0123456789"),
    # Slack tokens and webhooks.
    ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("xoxp-1234567890-0987654321-abcdefABCDEF", "xoxp-1234567890"),
    ("app token xapp-1-A0123456789-0123456789012-abcdef", "xapp-1-A0123456789"),
    (
        "POST https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    ),
    (
        "notify https://discord.com/api/webhooks/123456789/AbCdEfGhIjKlMnOp",
        "123456789/AbCdEfGhIjKlMnOp",
    ),
    # Stripe.
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("restricted rk_live_51H8abcdEFGHijklMNOP", "rk_live_51H8abcdEFGHijklMNOP"),
    ("STRIPE_WEBHOOK whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "MfKQ9r8GKYqrTwjUPD8I"),
    ("npm config set npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKlMnOpQrSt"),
    ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234 login", "hf_AbCdEfGhIjKlMnOpQrSt"),
    # OpenAI, Anthropic, Google, JWT.
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234", "sk-proj-abcdefghijklmnop1234"),
    ("using sk-ant-api03-abcdefghijklmnopqrstu", "sk-ant-api03-abcdefghijklmnopqrstu"),
    ("key=AIzaSyA-abcdefghijklmnopqrstuvwxyz01234", "AIzaSyA-abcdefghijklm"),
    ("maps AIzaSyA-abcdefghijklmnopqrstuvwxyz01234 loaded", "AIzaSyA-abcdefghijklm"),
    # devs' own operator tokens (devs operator add).
    (
        "operator devs_op_l8HXCjGzHs6xWzn_SQ2Dj3FsdNPPCsbJvUqsty-4ZQk signed in",
        "l8HXCjGzHs6xWzn_SQ2Dj3Fs",
    ),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijklmnop",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    ),
    # Private key blocks, whole and truncated; PGP.
    (
        f"-----BEGIN RSA PRIVATE KEY-----\n{_PEM_BODY}\n-----END RSA PRIVATE KEY-----",
        _PEM_BODY,
    ),
    (f"cat id_rsa\n-----BEGIN OPENSSH PRIVATE KEY-----\n{_PEM_BODY}\n", _PEM_BODY),
    (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n"
        "lQOYBF0fFbwBCADJkVkXK9pR\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----",
        "lQOYBF0fFbwBCADJkVkXK9pR",
    ),
    (
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBF0fFbwBCADJkVkXK9pR",
        "lQOYBF0fFbwBCADJkVkXK9pR",
    ),
    # Credentials in URLs.
    ("postgresql://admin:topsecret@db.internal:5432/app", "topsecret"),
    ("redis://:r3d1s@localhost:6379", "r3d1s"),
    ("git clone https://bob:hunter2@github.com/org/repo.git", "hunter2"),
    # Flags.
    ("mysql --password s3cretpw -h db", "s3cretpw"),
    ("deploy --token=abc123tokenvalue", "abc123tokenvalue"),
    ("vault login --secret hushhush", "hushhush"),
    ("cli --api-key 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
    # Assignments of password / secret / token / api_key names.
    ("password=hunter2 rest", "hunter2"),
    ('{"db_password": "s3cr3t!"}', "s3cr3t!"),
    ("DB_PASSWD: pa55word", "pa55word"),
    ("pass=letmein", "letmein"),
    ("DB_PASS=letmein2", "letmein2"),
    ("client_secret='zz-top-secret'", "zz-top-secret"),
    ("api_key: abcdef123456", "abcdef123456"),
    ("ApiKey=Q2xpZW50S2V5", "Q2xpZW50S2V5"),
    ("refresh_token = 1//0gAbCdEfGh", "1//0gAbCdEfGh"),
    ("PGPASSWORD=pgpw123 psql", "pgpw123"),
    ("MYSQL_PWD=my5qlpw mysql", "my5qlpw"),
    ("GOOGLE_APPLICATION_CREDENTIALS: 'eyJ0eXBlIjoi'", "eyJ0eXBlIjoi"),
    ("session_id=0a1b2c3d4e5f", "0a1b2c3d4e5f"),
    ("AccountKey=bXlhY2NvdW50a2V5;EndpointSuffix=core", "bXlhY2NvdW50a2V5"),
    # Headers.
    ("Authorization: Bearer abcdef0123456789xyz", "abcdef0123456789xyz"),
    ("curl -H 'Authorization: token ghp_short'", "ghp_short"),
    ("authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("Cookie: sessionid=abc123def456; csrftoken=zzz", "abc123def456"),
    ("Set-Cookie: session=opaquevalue123; Path=/", "opaquevalue123"),
    ("X-Api-Key: 0123456789abcdef", "0123456789abcdef"),
    ("header x-api-key:k3yk3yk3y", "k3yk3yk3y"),
    ("X-Auth-Token: 7c9e6679-7425-40de-944b", "7c9e6679-7425-40de-944b"),
    ("X-Amz-Security-Token: FwoGZXIvYXdzEBYaDH", "FwoGZXIvYXdzEBYaDH"),
    ("Bearer eyJhbGciOi.Zm9vYmFy.c2lnbmF0dXJl", "eyJhbGciOi.Zm9vYmFy"),
]


def _pw(n: int) -> str:
    """The made-up password of form ``n``: each form has its own, so that a
    leak names the form it came from."""
    return "S3" + f"cret{n:02d}q"


# Signatures of signed URLs, shaped like the real thing (hex, percent-encoded
# base64, CloudFront's base64 with "-", "_", "~", plain base64 in JSON): at
# least 16 characters, as a signature is (sig=None is no signature).
_HEX = "9f3c" + "2b7e" * 15
_B64 = "q1Zx%2Bk9LmN" + "0pQrStUv%3D"
_CLOUDFRONT = "Nql641NHEUkU" + "aXQH~ZINK1FZ-SYeU_"
_BASE64 = "q1Zx+k9LmN/" + "0pQrStUv="
_R = REDACTED

# Credentials in the common forms of command lines and signed URLs (issue "The
# front door and the agent as attacker", point 10): the text, its secret, and
# the text as redaction leaves it, what names the secret kept (blank: the text
# with its secret, and the quotes of a JSON value, replaced).
_FORMS: list[tuple[str, str, str]] = [
    # curl's user:password (-u, --user, --proxy-user), quoted or not.
    (f"curl -u admin:{_pw(1)} https://api.example.com/v1", _pw(1), ""),
    (f"curl -sS --user deploy:{_pw(2)} -X POST https://api.example.com", _pw(2), ""),
    (f"curl --user=ci:{_pw(3)} https://api.example.com", _pw(3), ""),
    (
        f"curl -u 'admin:{_pw(4)} two' https://api.example.com",
        _pw(4),
        f"curl -u 'admin:{_R}' https://api.example.com",
    ),
    (f"curl --proxy-user bob:{_pw(5)} -x proxy:3128 https://a.example", _pw(5), ""),
    # mysql and mariadb: -p glued to its password.
    (f"mysql -h db -P 3306 -u root -p{_pw(6)} shop", _pw(6), ""),
    (
        f"mysqldump -uroot -p'{_pw(7)}' shop > dump.sql",
        _pw(7),
        f"mysqldump -uroot -p{_R} shop > dump.sql",
    ),
    (f"docker exec db mariadb -u root -p{_pw(8)} -e 'show tables'", _pw(8), ""),
    (f"/usr/bin/mysqladmin -p{_pw(9)} status", _pw(9), ""),
    # A registry or cloud login's -p, after a blank, glued or after "=".
    (f"docker login -u bob -p {_pw(10)} registry.example.com", _pw(10), ""),
    (f"podman login -u bob -p={_pw(11)} quay.io", _pw(11), ""),
    (f"az login -u ci@example.com -p {_pw(12)}", _pw(12), ""),
    (f"oc login https://api.example.com:6443 -u dev -p {_pw(13)}", _pw(13), ""),
    # sshpass's -p; the ssh -p 22 it runs is a port and stays.
    (f"sshpass -p {_pw(14)} ssh -p 22 deploy@example.com", _pw(14), ""),
    (
        f"sshpass -p'{_pw(15)}' scp app.tar deploy@example.com:/srv",
        _pw(15),
        f"sshpass -p{_R} scp app.tar deploy@example.com:/srv",
    ),
    # Single-dash flags: -password, keytool's -srcstorepass, openssl's
    # -passout pass:x, Go's -token.
    (f"app -password {_pw(16)} -v", _pw(16), ""),
    (
        f"keytool -importkeystore -srcstorepass {_pw(17)} -srckeystore in.p12",
        _pw(17),
        "",
    ),
    (f"openssl pkcs12 -export -passout pass:{_pw(18)} -out cert.p12", _pw(18), ""),
    (f"consul kv get -token {_pw(19)} app/config", _pw(19), ""),
    # pwd glued to a longer name is a password (PWD= and OLDPWD= are not).
    (f"export DB_PWD={_pw(20)}", _pw(20), ""),
    (f"Driver=ODBC;Server=db;Uid=sa;Pwd={_pw(21)};", _pw(21), ""),
    # A key whose value is the next key: that key's value goes.
    (f"password: token={_pw(22)}", _pw(22), ""),
    # Signed URLs: the signature goes, the other parameters stay.
    (
        "GET https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&ss=b&srt=o"
        f"&sp=r&se=2030-01-01T00:00:00Z&sig={_B64}{_pw(23)} 403",
        _B64 + _pw(23),
        "",
    ),
    (
        f"https://b.s3.amazonaws.com/k?X-Amz-Credential={_AWS}%2F20240101"
        f"%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature={_HEX}",
        _HEX,
        f"https://b.s3.amazonaws.com/k?X-Amz-Credential={_R}&X-Amz-Signature={_R}",
    ),
    (
        "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256"
        f"&X-Goog-Expires=900&X-Goog-Signature={_HEX}{_pw(24)}",
        _HEX + _pw(24),
        "",
    ),
    (
        f"https://b.s3.amazonaws.com/k?AWSAccessKeyId={_AWS}&Expires=1700000000"
        f"&Signature={_B64}{_pw(25)}",
        _B64 + _pw(25),
        f"https://b.s3.amazonaws.com/k?AWSAccessKeyId={_R}&Expires=1700000000"
        f"&Signature={_R}",
    ),
    (
        "https://d1.cloudfront.net/v.mp4?Expires=1700000000"
        f"&Signature={_CLOUDFRONT}{_pw(26)}&Key-Pair-Id=K2JCJMDEHXQW5F",
        _CLOUDFRONT + _pw(26),
        "",
    ),
    (f"redirect https://app.example.com/cb?token={_pw(27)}&page=2", _pw(27), ""),
    (
        "oauth_consumer_key=dpf43f3p2l4k3l03&oauth_signature_method=HMAC-SHA1"
        f"&oauth_signature={_pw(28)}{_B64}&oauth_nonce=kllo9940pd9333jh",
        _pw(28) + _B64,
        "",
    ),
    (
        f'{{"url": "https://x.example/f", "signature": "{_BASE64}{_pw(29)}"}}',
        _BASE64 + _pw(29),
        "",
    ),
]
CREDENTIAL_FORMS: list[tuple[str, str, str]] = [
    (text, secret, kept or text.replace(f'"{secret}"', _R).replace(secret, _R))
    for text, secret, kept in _FORMS
]
# Each is also in SECRETS, so it goes through every text path the corpus
# tests take.
SECRETS += [(text, secret) for text, secret, _ in CREDENTIAL_FORMS]

# Look like the forms above, hold no credential: each must stay as it is.
NOT_CREDENTIALS: list[str] = [
    "ssh -p 22 deploy@example.com uptime",
    "scp -P 2222 app.tar deploy@example.com:/srv",
    "pytest -k login -p no:cacheprovider -q",
    "git log -p -3 --stat",
    "pip install -U pip setuptools",
    "mkdir -p build/out && cd build/out",
    "mysql -h db -P 3306 -u root -p shop",  # -p and a blank: mysql prompts
    "mysql -P3306 -h db -u root",
    "curl -u admin https://api.example.com/v1",  # no password: curl prompts
    "curl --user-agent ua:1.0 https://api.example.com/v1",
    "curl -sS https://api.example.com/v1/items?page=2&per_page=50",
    "docker run --rm -u 1000:1000 -v /src:/src python:3.11",
    # -u user:group and -u of other tools: only curl's -u holds a password.
    "docker run --rm -u root:root alpine id",
    "docker run -u www-data:www-data nginx",
    "docker run --user postgres:postgres postgres:16",
    "git diff -u a:b",
    "sort -u input:1",
    "python -u app.py:12: DeprecationWarning",
    "docker login -u bob registry.example.com",
    "sshpass -f ~/.sshpass ssh -p 22 deploy@example.com",
    "rsync -u deploy@example.com:/srv/app ./app",
    "git push -u origin main",
    "gcc -I/usr/include/mysql -pthread -c _mysql.c -o _mysql.o",
    "sign=1 design=flat signal=15 signed=true",
    # sig= and signature= in code: no value shaped like a signature.
    "sig=None",
    "sig=0",
    "assert sig=='x'",
    "signature=None signature=0 sig=inspect.signature(fn)",
    "signature = hmac.new(secret_bytes, body, sha256).hexdigest()",
    "PWD=/home/user/project OLDPWD=/home/user SHLVL=1",
    "PWD: /home/user/project",
    'echo "PWD=$PWD OLDPWD=$OLDPWD"',
    "DB_PASSWORD=*** (masked)",
    "the keys password=, passwd:, passphrase=, pass=) and token: ... are refused",
]

ORDINARY: list[str] = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b by alice",
    "deadbeefcafebabe0123456789abcdef01234567",
    "request 123e4567-e89b-12d3-a456-426614174000 done",
    "tests/unit/test_parser.py::test_token_count[case-3] PASSED",
    "tests/integration/test_auth.py::TestLogin::test_password_reset FAILED",
    "tests/test_secret_store.py::test_rotate",
    "/home/user/project/src/pkg/password_policy.py:42: AssertionError",
    "/usr/lib/python3.11/site-packages/requests/auth.py",
    "see https://docs.python.org/3/library/re.html#module-re",
    "GET https://api.example.com/v1/items?page=2 200",
    "mail bob.smith@example.com or git@github.com:org/repo.git",
    "pytest -p no:cacheprovider -q tests",
    "5 passed, 2 failed, 1 skipped in 3.21s",
    "AssertionError: expected 3 == 4 in test_parser.py:12 (token count)",
    "E       assert tokenize('a b') == ['a', 'b']",
    "Bearer tokens are checked in auth.py",
    "the password field must not be empty",
    "max_tokens limit reached after 3 retries",
    "------------------------------ Captured log call -------------------------------",
    "=========================== short test summary info ============================",
    "key error: 'user' not found",
    "Traceback (most recent call last):",
    "a:b@c and x=y and -----BEGIN CERTIFICATE-----",
    "bypass=1 passed: 3",
    "python -m pip install --upgrade pip",
    *NOT_CREDENTIALS,
]

HOSTILE_SIZE = 200_000
# The literals of the command-line and signed-URL rules, repeated, without a
# secret (HOSTILE_COMMANDS below hold one).
HOSTILE_COMMANDS_HARMLESS: list[str] = [
    "mysql ",
    "mysql -u a ",
    "mysql " + "a" * 250 + " ",
    "docker login ",
    "sshpass -v ",
    "curl -u a ",
    "curl " + "a" * 250 + " ",
    "docker run -u root:root ",
    "sign=",
    "sig=None ",
    "ssh -p 22 ",
    "-p ",
    "PWD=/",
    "OLDPWD=/x ",
    "token: ... ",
]
# Hostile texts that hold no secret, so each must come back as is.
HOSTILE_HARMLESS: list[str] = [
    "a.",
    "a@",
    ":",
    "-----BEGIN ",
    "https://a",
    "x=",
    "password ",
    "\\",
    "a:b@",
    " ",
    "Bearer ",
    "eyJ",
    "token",
    "ghp_",
    "://a:",
    *HOSTILE_COMMANDS_HARMLESS,
]
# The hostile texts of the issue "Hardening" (bench/ times each: >= 20 MB/s).
HOSTILE_ISSUE: list[str] = [
    "a.",
    "a@",
    ":",
    "-----BEGIN ",
    "AKIA",
    "https://a",
    "x=",
    "password ",
    "\\",
    "a:b@",
    " ",
    "Bearer ",
]
# Beyond that list: each rule's own literal, repeated. Some are dense with
# real matches ('pwd="' is a secret every 5 characters), which costs more per
# character than finding nothing; the bench reports them without a target.
HOSTILE_MORE: list[str] = [
    "eyJ",
    "token",
    'pwd="',
    "--password ",
    "ghp_",
    "sk-",
    "xoxb-",
    "pass: ",
    "://a:",
    "-----BEGIN RSA PRIVATE KEY-----\n",
    "Authorization: ",
    "hooks.slack.com/services/",
]
# The literals of the command-line and signed-URL rules, repeated, with a
# secret (each "-p" of "mysql -p" holds one). Not in the bench's lists above,
# whose sizes bench/redaction_speed.py reports;
# tests/adversarial/test_credentials.py checks that every text path stays
# linear on these and on HOSTILE_COMMANDS_HARMLESS.
HOSTILE_COMMANDS: list[str] = [
    "mysql -p",
    "curl -u a:",
    "curl --user a:",
    "sig=",
    "docker login -p ",
    "sshpass -p ",
    "-password ",
    "-storepass ",
    "pass=)",
    "password: token=",
    "DB_PWD=/",
]
HOSTILE_UNITS = HOSTILE_ISSUE + HOSTILE_MORE + HOSTILE_COMMANDS


def hostile(unit: str, size: int = HOSTILE_SIZE) -> str:
    """``unit`` repeated to ``size`` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def runner_output(size: int) -> str:
    """Ordinary pytest-like output of about ``size`` characters, no secrets."""
    lines = [
        "=" * 29 + " test session starts " + "=" * 29,
        "platform linux -- Python 3.11.7, pytest-8.3.3, pluggy-1.5.0",
        "rootdir: /home/user/project",
    ]
    total = sum(len(line) + 1 for line in lines)
    i = 0
    while total < size:
        line = ORDINARY[i % len(ORDINARY)] + f" [{i % 100:3d}%]"
        lines.append(line)
        total += len(line) + 1
        i += 1
    return "\n".join(lines)[:size]
