"""Serving: a stream of requests through an engine scheduler on any hardware kind
whose mapper can cost one iteration (`sim serve`, docs/serving.md).

Public API: sim.apps.serve.run.serve (one run), spec.load_serve_file, arrivals.make_requests,
setup.prepare, engine.ServeSim, metrics.summarize, capacity.find_capacity,
stepcost.ExactCost / Surrogate, sim.core.mixed.lower_iteration. The package itself imports
nothing, so `sim`'s start-up does not load the serving engine."""
