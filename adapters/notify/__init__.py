"""The notify edge: what is recorded, told to the places that must hear it
(docs/notifications.md).

One settings class (``settings``), one status mapping (``status``), the
``Channel`` protocol (``channel``) and the channels known (``registry``), one
module per channel (``webhook``, ``slack``, ``email``), the text a person
reads (``people``), and the background work (``sender``, ``sweeper``).
"""
