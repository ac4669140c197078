"""Real traces: parse torch profiler traces and profiled op tables, validate the
simulator op by op against them, replay them on other hardware, and calibrate
a preset's efficiency curves from them."""
