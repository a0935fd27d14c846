"""The listing commands: ``gpusim specs`` (GPU spec files and their figures' sources), ``gpusim hosts`` (host profiles) and ``gpusim examples`` (built-in examples and the zoo)."""

from __future__ import annotations


def cmd_specs(a) -> int:
    """Without a GPU: the table of all specs; with one: its every figure, value, source
    and ref (where each figure came from)."""
    from gpusim.hw.spec import list_specs, load_spec
    from gpusim.hw.spec_io import figures_table, specs_table
    print(figures_table(load_spec(a.gpu)) if a.gpu else specs_table(list_specs()))
    return 0


def cmd_hosts(a) -> int:
    from gpusim.hw.host import hosts_table, list_hosts
    print(hosts_table(list_hosts()))
    return 0


def cmd_examples(a) -> int:
    from gpusim.models.examples import EXAMPLES
    from gpusim.util.fmt import table
    rows = [[e.name, e.category, e.description,
             " ".join(f"{k}={v}" for k, v in e.defaults.items())] for e in EXAMPLES.values()]
    print(table(rows, ["name", "category", "description", "defaults"], "llll"))
    print()
    try:
        from gpusim.models import zoo       # optional extra: torchvision, timm, transformers
    except ImportError:
        print("real-model zoo (tv:, timm:, hf:): install the zoo extra, pip install 'gpusim[zoo]'")
        return 0
    rows = [[name, fam, desc, sizes] for name, fam, _lib, desc, sizes in zoo.catalogue()]
    print(table(rows, ["zoo model", "family", "description", "defaults"], "llll"))
    print("\nany other name its library lists works too: timm:NAME (timm.list_models()), "
          "tv:NAME (torchvision.models.list_models()), hf:ID or hf:path/to/config_dir "
          "(a Hugging Face config, never downloaded)")
    return 0
