"""`lincorr cache`: what the cache holds and how large it is, and clearing it, without finding the directory by hand."""

from __future__ import annotations

from lincorr.cli.options import add_command, add_json_option, print_json
from lincorr.errors import printable


def add_commands(commands) -> None:
    cache = add_command(commands, "cache")
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = add_command(actions, "list", "each section with its entries and size, and where the cache is")
    add_json_option(listing)
    listing.set_defaults(handler=run_list)
    add_command(actions, "size", "the cache's total size").set_defaults(handler=run_size)
    clear = add_command(actions, "clear", "remove sections of the cache (all of them unless one is named)")
    for section, what in (("models", "converted models"), ("tables", "logit tables"), ("results", "stored study rows"),
                          ("checkpoints", "fine-tuned checkpoints")):
        clear.add_argument(f"--{section}", action="store_true", help=f"only the {what}")
    clear.set_defaults(handler=run_clear)


def checked_root():
    """The cache root, refused (one error line) when it is something other than a directory, or lies under a file (where
    it could never be made, and would look empty); nothing is created."""
    from lincorr.cache import cache_root
    from lincorr.errors import CacheError
    from lincorr.filesystem import nearest_existing

    root = cache_root()
    if root.exists() and not root.is_dir():
        raise CacheError(f"cache directory {root} is not a directory; point LINCORR_CACHE_DIR at a directory")
    existing = nearest_existing(root)
    if not existing.is_dir():
        raise CacheError(f"cache directory {root} lies under {existing}, which is not a directory; point LINCORR_CACHE_DIR at a directory")
    return root


def run_list(args) -> None:
    from lincorr.cache import cache_root, cache_usage
    from lincorr.reading import human_size

    checked_root()
    usage = cache_usage()
    if args.json:
        print_json({"root": str(cache_root()),
                    "sections": [{"section": u.section, "path": str(u.path), "entries": u.entries, "bytes": u.bytes} for u in usage]})
        return
    # The cache's path is LINCORR_CACHE_DIR's or HOME's, which may hold a line break or a terminal's escape.
    print(printable(f"cache {cache_root()} (LINCORR_CACHE_DIR moves it)"))
    width = max(len(u.section) for u in usage)
    for u in usage:
        print(printable(f"  {u.section:<{width}} {u.entries:6d} entries  {human_size(u.bytes):>9}  {u.path}"))


def run_size(args) -> None:
    from lincorr.cache import cache_root, cache_usage
    from lincorr.reading import human_size

    checked_root()
    print(printable(f"{human_size(sum(u.bytes for u in cache_usage()))}  {cache_root()}"))


def run_clear(args) -> None:
    from lincorr.cache import SECTIONS, clear_cache

    checked_root()
    chosen = [section for section in SECTIONS if getattr(args, section)] or list(SECTIONS)
    removed = clear_cache(chosen)
    print(printable(f"removed {', '.join(map(str, removed))}") if removed else f"nothing to remove ({', '.join(chosen)} already empty)")
