"""Tuning: what the language's tuner (:func:`tiramisu_py.tune`), the library's
(:func:`schedules.tune_library`) and the parallel grain share, in one package
on the bottom floor (it imports only ``codegen``):

database  the store: one SQLite file of records (kind, key) -> JSON value
confirm   a search's winner timed against the defaults, interleaved (the A/B)
keys      who a record is for: the host's identity and the sizes' class
kinds     a tuner's records by name: listed, described, forgotten
search    what both searches share: argument checks, the progress bar
grain     the parallel grain, a per-host tuned value that every compile reads

The store's module-level calls are re-exported here (``tuning.get``,
``tuning.put``, ``tuning.store()``, ``tuning.generation()``, ...)."""
from .database import (DB_FILE, SCHEMA_VERSION, Store, TuningStoreWarning, close, forget,
                       generation, get, put, records, store)

__all__ = ["DB_FILE", "SCHEMA_VERSION", "Store", "TuningStoreWarning", "close", "forget",
           "generation", "get", "put", "records", "store"]
