"""Command line of the benchmark scripts that run by section name."""

import sys


def run_sections(sections, doc, default=None, wrap=None):
    """Run the sections named on the command line, in that order.

    With no name, run ``default`` (all of ``sections`` when None). ``-h`` or
    ``--help`` prints the script's docstring ``doc``; a name that is not a
    section stops with the list of those that are. ``wrap``, if given, is a
    context manager factory each section runs inside.
    """
    names = sys.argv[1:]
    if "-h" in names or "--help" in names:
        print(doc)
        return
    unknown = [name for name in names if name not in sections]
    if unknown:
        raise SystemExit(
            f"unknown section {', '.join(unknown)}; the sections are: "
            f"{', '.join(sections)}"
        )
    for name in names or default or list(sections):
        if wrap is None:
            sections[name]()
        else:
            with wrap():
                sections[name]()
