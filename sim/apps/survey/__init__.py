"""`sim survey`: the analyses of the LLM roofline survey (Yuan et al. 2024,
arXiv:2402.16363, and its tool LLM-Viewer) redone with this simulator, each
prediction shown beside the pure roofline and, where a measurement exists,
beside the measurement with the error of each."""
