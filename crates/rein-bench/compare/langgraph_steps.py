"""LangGraph's durable steps on the same disk as rein's, for the README's
side-by-side: a chain of N no-op nodes compiled with LangGraph's SQLite
checkpointer (langgraph-checkpoint-sqlite, the durable saver its docs name
for local use), run with durability="sync" (each step's checkpoint is
committed before the next step starts, as rein commits each step), and
bare SQLite commits on the same disk with the same settings (WAL,
synchronous=FULL), timed half before and half after; then, on the same
saver, the time from a person's answer to an `interrupt()` (the graph
resumed with `Command(resume=…)`) to the next node starting.

    pip install langgraph==1.2.24 langgraph-checkpoint-sqlite==3.1.2
    python3 crates/rein-bench/compare/langgraph_steps.py --steps 1000 --runs 5

Prints one JSON line: steps/s (median over the runs, each on a fresh file),
the bare commits/s, and their ratio, with every run's figures.
"""

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt


class State(TypedDict):
    n: int


def chain(steps: int):
    graph = StateGraph(State)
    for i in range(steps):
        graph.add_node(f"s{i}", lambda state: {"n": state["n"] + 1})
    graph.add_edge(START, "s0")
    for i in range(steps - 1):
        graph.add_edge(f"s{i}", f"s{i + 1}")
    graph.add_edge(f"s{steps - 1}", END)
    return graph


def bare_commits(path: str, count: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB)")
    started = time.perf_counter()
    for _ in range(count):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO t (v) VALUES (?)", (b"x" * 100,))
        conn.execute("COMMIT")
    took = time.perf_counter() - started
    conn.close()
    return count / took


def decision_to_next_step(directory: str, rounds: int) -> list:
    """A person's answer to an `interrupt()` (resumed with `Command`) to the
    next node starting, each round on a thread of its own, in ms."""
    started_next = {}

    def ask(state):
        answer = interrupt("ship?")
        return {"n": 1 if answer == "yes" else 0}

    def after(state):
        started_next["at"] = time.perf_counter()
        return {"n": state["n"] + 1}

    graph = StateGraph(State)
    graph.add_node("ask", ask)
    graph.add_node("after", after)
    graph.add_edge(START, "ask")
    graph.add_edge("ask", "after")
    graph.add_edge("after", END)
    conn = sqlite3.connect(os.path.join(directory, "asks.db"), check_same_thread=False)
    app = graph.compile(checkpointer=SqliteSaver(conn))
    took = []
    for i in range(rounds):
        config = {"configurable": {"thread_id": f"ask-{i}"}}
        app.invoke({"n": 0}, config, durability="sync")
        answered = time.perf_counter()
        app.invoke(Command(resume="yes"), config, durability="sync")
        took.append((started_next["at"] - answered) * 1000)
    conn.close()
    return took


def one_run(steps: int, directory: str) -> dict:
    bare_path = os.path.join(directory, "bare.db")
    before = bare_commits(bare_path, steps // 2)
    path = os.path.join(directory, "langgraph.db")
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    app = chain(steps).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
    started = time.perf_counter()
    out = app.invoke({"n": 0}, config, durability="sync")
    took = time.perf_counter() - started
    assert out["n"] == steps, out
    commits = conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0]
    conn.close()
    after = bare_commits(bare_path, steps - steps // 2)
    ceiling = 2 / (1 / before + 1 / after)
    return {
        "steps_per_s": steps / took,
        "bare_commits_per_s": ceiling,
        "checkpoints_written": commits,
        "synchronous": synchronous,
        "journal_mode": journal,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--decisions", type=int, default=200)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
            runs.append(one_run(args.steps, d))
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        decisions = sorted(decision_to_next_step(d, args.decisions))
    steps = statistics.median(r["steps_per_s"] for r in runs)
    ceiling = statistics.median(r["bare_commits_per_s"] for r in runs)
    print(
        json.dumps(
            {
                "bench": "langgraph_steps",
                "steps": args.steps,
                "runs": args.runs,
                "steps_per_s": round(steps),
                "bare_commits_per_s": round(ceiling),
                "steps_over_ceiling": round(steps / ceiling, 3),
                "decision_to_next_step_ms_p50": round(decisions[len(decisions) // 2], 2),
                "decision_to_next_step_ms_p99": round(decisions[len(decisions) * 99 // 100], 2),
                "each_run": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
