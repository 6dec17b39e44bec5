"""In-process profile of served turns: uvicorn in this loop, the drill's light client; cProfile call counts."""
import asyncio, cProfile, json, os, pstats, sys, time
sys.path.insert(0, "/work/main/scripts")
os.environ.setdefault("DRILL_TOKEN_S", "0.001")
os.environ["HYDE_SERVER__DATABASE_URL"] = f"sqlite:////work/s14/prof-{int(time.time())}.db"
os.environ["HYDE_SERVER__OPERATOR_TOKEN"] = "x"
os.environ["HYDE_SERVER__RATE_PER_MINUTE"] = "100000"
os.environ["HYDE_SERVER__NEW_LEARNERS_PER_MINUTE"] = "100000"
import uvicorn
from serve_drill import stub_app, learner
SESS, TURNS = int(sys.argv[1]), int(sys.argv[2])
async def main():
    app = stub_app()
    cfg = uvicorn.Config(app, port=8765, log_level="warning", loop="none")
    server = uvicorn.Server(cfg)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.1)
    qs = [json.loads(l)["text"] for l in open("/work/main/data/eval/grammar/queries.jsonl")]
    await asyncio.gather(*(learner("http://127.0.0.1:8765", n, qs, 1) for n in range(4)))  # warm
    import gc
    gct = {"t": 0.0, "n": [0, 0, 0], "start": 0.0}
    def cb(phase, info):
        if phase == "start": gct["start"] = time.perf_counter()
        else:
            gct["t"] += time.perf_counter() - gct["start"]; gct["n"][info["generation"]] += 1
    gc.callbacks.append(cb)
    if os.environ.get("FREEZE"): gc.freeze()
    if os.environ.get("THR"): gc.set_threshold(*map(int, os.environ["THR"].split(",")))
    print("objects tracked", len(gc.get_objects()), "frozen", gc.get_freeze_count())
    prof = cProfile.Profile() if not os.environ.get("NOPROF") else None
    t = time.perf_counter(); prof and prof.enable()
    rows = await asyncio.gather(*(learner("http://127.0.0.1:8765", 100 + n, qs, TURNS) for n in range(SESS)))
    prof and prof.disable(); wall = time.perf_counter() - t
    n = sum(len(r) for r in rows)
    print("turns", n, "wall", round(wall, 2), "failed", sum(x["failed"] for r in rows for x in r))
    print("gc seconds", round(gct["t"], 3), "collections", gct["n"], "cpu", time.process_time())
    if prof:
        prof.dump_stats("/work/s14/prof.out"); pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    server.should_exit = True; await task
import uvloop; uvloop.run(main())
