"""The event store's edge: everything that names a database.

``persistence`` (the mapper, transcoder and SQLite recorders that fold the
read models as they record), ``postgres`` (the ``postgres`` extra),
``internals`` (eventsourcing's private names they rely on) and ``errors``
(what a database's error says, handed to the domain through its port). The
domain names none of this: it gets its store by topic from ``env``
(``devs.adapters.config.assemble``).
"""
