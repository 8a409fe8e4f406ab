"""The notify edge: what is recorded, told to the places that must hear it
(docs/notifications.md).

- :mod:`~devs.adapters.notify.settings`: the one settings class (``DEVS_*``);
- :mod:`~devs.adapters.notify.status`: what an answer comes to, for every
  channel, and when to try again;
- :mod:`~devs.adapters.notify.channel`: the ``Channel`` protocol and the
  ``Endpoint`` a channel gives; :mod:`~devs.adapters.notify.registry`: the
  channels known; one module per channel:
  :mod:`~devs.adapters.notify.webhook`, :mod:`~devs.adapters.notify.slack`,
  :mod:`~devs.adapters.notify.email`;
- :mod:`~devs.adapters.notify.people`: the text a person reads;
- :mod:`~devs.adapters.notify.sender` and
  :mod:`~devs.adapters.notify.sweeper`: the background work.
"""
