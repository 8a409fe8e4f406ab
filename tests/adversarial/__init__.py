"""The adversarial suite: attacks an agent can mount through the tools we give
it (gate commands, hook events, MCP calls, HTTP requests), each run against the
real process (docs/security.md, "Threat model")."""
