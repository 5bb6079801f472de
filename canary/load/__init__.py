"""Load generation for the throughput check: locust (FastHttpUser, gevent) used as a library.

Modules that import locust (`user`, `locust_driver`, `openloop`, `process`) monkey-patch the whole process with gevent
the moment they are imported, so the canary never imports them itself: every load run is a
subprocess (`python -m canary.load.process`), started and read by `launch`. The other modules
(`workload`, `schedule`, `sse`, `rxstamp`, `stats`, `launch`) are plain Python and safe to import anywhere.
The stand-in server with scripted timing that measures this client is test support:
`tests/support/scripted_server.py`.
"""
