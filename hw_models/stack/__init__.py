"""The software-stack model: how an inference engine runs the lowered op graph as kernels.

spec.py: the stack schema and its files (presets/<name>.yaml, one cited file per stack);
cost.py: an op's time under a stack's kernels; fuse.py: the GEMMs a stack runs as one;
row_kernels.py: kernels that walk rows value by value; kernel_families.py (+ .yaml):
quantized GEMM kernel families; step_overhead.py: a serving engine's host work per step.
Nothing is imported here, so `hw_models.stack.step_overhead` (which base.py needs) loads
without the rest."""
