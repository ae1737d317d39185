"""Dependency declarations and launchers: the non-Python files of a repository that decide how it is
installed and started (requirements files, pyproject.toml, setup.cfg/setup.py, conda environment
files, Dockerfiles, shell/Slurm/Makefile launchers, .env files).

Each kind (``kinds.KINDS``) scans a file's text into the same ``Finding``s and edits the Python rules
produce, so the patch, the reports, SARIF, suppressions, the cache and the exit codes treat them
alike; ``run`` migrates them after the Python files (an added torch-npu requirement depends on
whether the migrated code imports torch_npu).
"""
