"""The event store's edge: everything that names a database.

- ``persistence``: the application's ``env`` topics (mapper, transcoder), the
  pydantic mapper and orjson transcoder, and eventsourcing's SQLite factory,
  pool and recorders as the service uses them (folding the read models in the
  transaction that records the events);
- ``postgres``: eventsourcing's PostgreSQL persistence (needs the ``postgres``
  extra);
- ``internals``: the private names of eventsourcing those classes rely on;
- ``errors``: what a database's error says (another writer's lock, a full
  disk, a damaged or read-only file), read from its error codes and texts and
  handed to the domain through its port
  (:func:`devs.domain.commands.reads_store_errors`).

The domain names none of this: it gets its store by topic from ``env``
(``devs.adapters.config.assemble``).
"""
