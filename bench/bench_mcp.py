"""Benchmark: should-run over MCP (`loopx mcp`, a long-lived process) beside the CLI's.

Not a test. Fills a registry through the Python API exactly as `bench_should_run.py` does (every
goal with a budget, three todos and two actions; the measured goal has an open run of the asking
agent, so each call makes the whole decision and hands the run back), starts `loopx mcp` with an
MCP client from the official SDK, and times `should_run` tool calls round trip from the client.
Beside it: whole `python -m loopx --format json quota should-run` processes on the same registry.
Usage:

    python bench/bench_mcp.py [--goals 10000] [--calls 500] [--runs 15]

Targets at 10,000 goals, over MCP: p50 <= 5 ms, p99 <= 20 ms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench_should_run import AGENT, fill
from timing import child_env, time_ms


async def over_mcp(url: str, goal_id: str, calls: int) -> list[float]:
    """Round-trip times (ms) of ``calls`` should_run tool calls from an SDK client."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "loopx", "mcp"],
                                   env=child_env(LOOPX_REGISTRY=url))
    samples = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            args = {"goal_id": goal_id, "agent": AGENT}
            for _ in range(20):  # warm-up
                await session.call_tool("should_run", args)
            for _ in range(calls):
                start = time.perf_counter()
                result = await session.call_tool("should_run", args)
                samples.append((time.perf_counter() - start) * 1000)
                assert not result.is_error, result
    return samples


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    import anyio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()

    tmp = tempfile.mkdtemp(prefix="loopx-bench-mcp-")
    try:
        url = os.path.join(tmp, "registry.db")
        started = time.perf_counter()
        goal_id = fill(url, args.goals)
        filled = time.perf_counter() - started
        mcp = anyio.run(over_mcp, url, goal_id, args.calls)
        env = child_env(LOOPX_REGISTRY=url, LOOPX_AGENT=AGENT)
        argv = [sys.executable, "-m", "loopx", "--format", "json", "quota", "should-run", "--goal-id", goal_id]
        time_ms(argv, env)
        cli = [time_ms(argv, env) for _ in range(args.runs)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"registry: {args.goals} goals (filled in {filled:.1f} s); MCP: {args.calls} calls after 20 warm-up; "
          f"CLI: {args.runs} whole processes")
    print(f"{'case':<34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    print(f"{'should_run over MCP (round trip)':<34} {statistics.median(mcp):>8.2f} {pct(mcp, 99):>8.2f} {max(mcp):>8.2f}")
    print(f"{'quota should-run (CLI process)':<34} {statistics.median(cli):>8.2f} {pct(cli, 99):>8.2f} {max(cli):>8.2f}")
    p50, p99 = statistics.median(mcp), pct(mcp, 99)
    print(f"targets over MCP at {args.goals} goals: p50 <= 5 ms ({'met' if p50 <= 5 else 'MISSED'}), "
          f"p99 <= 20 ms ({'met' if p99 <= 20 else 'MISSED'})")


if __name__ == "__main__":
    main()
