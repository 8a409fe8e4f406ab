"""The circuit breaker inside coding agents: ``devs hook AGENT`` and
``devs hooks install|uninstall|status`` (docs/agents.md).

- :mod:`.breaker`: the decisions (events in the referee's terms, the answers);
- :mod:`.dialect` and one module per agent (:mod:`.registry` lists them): each
  agent's protocol and settings file;
- :mod:`.install`: the breaker's entries merged into a settings file;
- :mod:`.client`, :mod:`.server`, :mod:`.runner`: the fast path (a small
  client, a server holding the store open) and the plain one.

Nothing is imported here: the fast path loads only what it needs.
"""
