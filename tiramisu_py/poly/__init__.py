"""The polyhedral model: ``build_model(f)`` (domains, accesses, program order), compute_at,
dataflow (last writers) and the footprints of copies."""
