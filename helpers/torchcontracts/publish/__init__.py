"""Course tools that run the lessons: the claims ledger, the static site, the GPU record and its comparisons."""
