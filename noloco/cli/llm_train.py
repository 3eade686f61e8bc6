"""``noloco llm train``: one run per method (metrics.jsonl, checkpoints, result.json under OUT), with a
comparison table (noloco.llm_check.train.train_methods); started by torchrun, one replica per rank
(noloco.llm_check.train.train_rank)."""

from __future__ import annotations


def add_parser(sub) -> None:
    from noloco.cli.llm_flags import add_train_arguments

    train = sub.add_parser("train", help="one run per method; metrics.jsonl, checkpoints, result.json under OUT",
                           description="Train; with several methods (--method ddp,diloco,noloco, the cpu-small "
                                       "default) each goes to OUT/METHOD and a comparison table is printed. Under "
                                       "torchrun (torchrun --nproc-per-node N -m noloco llm train ...) one method, "
                                       "one replica per rank.")
    add_train_arguments(train, methods_list=True)
    train.set_defaults(run=run)


def run(args) -> int:
    from noloco.advice.run_rows import RunResult
    from noloco.cli.llm_flags import apply_config_file, configs_from_args
    from noloco.infra.errors import ConfigError
    from noloco.infra.entry import failed
    from noloco.infra.files import print_json
    from noloco.llm_check.train import format_results, torchrun_world_size

    from_file = apply_config_file(args)
    world = torchrun_world_size()
    if world is not None and args.replicas is None and world % (args.stages or 1) == 0:
        args.replicas = world // (args.stages or 1)  # as torchtitan and accelerate: the replicas are the ranks
    configs = configs_from_args(args)
    if args.print_config:
        from noloco.llm_check.config import default_log_every
        from noloco.llm_check.resources import memory_estimate, time_estimate

        flags = {k: getattr(args, k) for k in ("out", "threads", "timeout", "max_memory", "tensorboard")}
        print_json({"config_file": args.config, "from_config_file": sorted(from_file), "run_flags": flags, "runs": [
            {"config": cfg.as_dict(), "log_every": args.log_every or default_log_every(cfg),
             "memory_bytes": memory_estimate(cfg), "time_seconds": time_estimate(cfg)} for cfg in configs]})
        return 0
    shown = {"log_every": args.log_every, "tensorboard": bool(args.tensorboard)}
    if world is not None:
        if len(configs) > 1:
            raise ConfigError(f"--method {','.join(c.method for c in configs)}: under torchrun a run trains one "
                              f"method; give one (e.g. --method {configs[-1].method})")
        from noloco.llm_check.train import train_rank

        results = {configs[0].method: train_rank(configs[0], args.out, resume=args.resume,
                                                 stop_after=args.stop_after, threads=args.threads,
                                                 overwrite=args.overwrite, timeout=args.timeout,
                                                 max_memory=args.max_memory, **shown)}
        reports = RunResult.from_json(results[configs[0].method]).rank == 0  # rank 0 reports for the whole run
    else:
        from noloco.llm_check.train import train_methods

        results = train_methods(configs, args.out, resume=args.resume, stop_after=args.stop_after,
                                threads=args.threads, overwrite=args.overwrite, max_memory=args.max_memory, **shown)
        reports = True
    if reports:
        print_json({"runs": results}) if args.json else print(format_results(results))
    from noloco.llm_check.divergence import Diverged

    runs = {method: RunResult.from_json(r) for method, r in results.items()}
    diverged = {method: Diverged.from_json(r.diverged).message for method, r in runs.items() if r.diverged}
    if diverged and reports:  # the finding, on stderr too: exit 1
        return failed("; ".join(f"{method} {message}" for method, message in diverged.items()))
    return 1 if diverged else 0
