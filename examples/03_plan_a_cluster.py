"""03: plan and simulate training a Llama on a cluster we don't have.

    python examples/03_plan_a_cluster.py
"""
import json
import subprocess
import sys

result = subprocess.run(
    [sys.executable, "-m", "cherenkov.cli", "plan", "--model", "llama3-70b",
     "--cluster", "64x8xH100", "--global-batch", "1024", "--seq", "8192", "--json"],
    capture_output=True, text=True, check=True)
plan = json.loads(result.stdout[result.stdout.index("{"):])
assert plan["step_time_s"] > 0 and 0 < plan["mfu"] < 1
print(json.dumps({k: plan[k] for k in ("step_time_s", "tokens_per_s", "mfu", "plan")}, indent=2))
