"""`sim cache info|clear`: the persistent step-cost tables (sim.apps.serve.tablecache)."""

from __future__ import annotations

import argparse


def cmd_cache(args: argparse.Namespace) -> int:
    from sim.apps.serve import tablecache

    path = tablecache.cache_dir() / tablecache.FILE
    why = tablecache.unusable()   # makes the folder where it can (a run would)
    if args.cache_cmd == "clear":
        if why:
            print(f"nothing to clear at {path} ({why})")
            return 0
        tablecache.clear()
        print(f"cleared {path}")
        return 0
    size = sum(p.stat().st_size for p in path.parent.glob(tablecache.FILE + "*")) if path.parent.is_dir() else 0
    off = "off (SIM_NO_CACHE: a process's runs share step costs in memory only)"
    state = off if not tablecache.enabled() else f"unusable, runs go without it ({why})" if why else "on"
    if getattr(args, "format", "table") == "json":   # for scripts, as --format json promises every subcommand
        import json
        print(json.dumps(dict(path=str(path), size_bytes=size, enabled=tablecache.enabled(), unusable=why or None,
                              moved_by=tablecache.ENV_DIR)))
        return 0
    print(f"{path}: {size / 1e6:.2f} MB; cache {state}; {tablecache.ENV_DIR} moves it")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("cache", help="the persistent step-cost tables of `sim serve`")
    sub = p.add_subparsers(dest="cache_cmd", required=True)
    sub.add_parser("info", help="where the cache is and its size").set_defaults(func=cmd_cache)
    sub.add_parser("clear", help="delete every cached step cost").set_defaults(func=cmd_cache)
