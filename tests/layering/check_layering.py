#!/usr/bin/env python3
"""The layering rules of docs/architecture.md, checked on the sources and the link graph.

Usage: check_layering.py SOURCE_DIR LINK_GRAPH_FILE

Include rules (every tracked C++/CUDA file under the folder, tests included):
  kernels/   includes only core/ and kernels/ (kernels know no engine, cache or server)
  kvcache/   includes only core/ and kvcache/ (caches know no scheduler)
  core/      includes only core/
  scheduler/ includes core/, kvcache/, scheduler/ and of engine/ only the plain step contract,
             the images it carries and the sampler (engine/step.h, engine/media_embedding.h,
             engine/sampling.h)
  nothing below server/ (core, kernels, kvcache, engine, dist, scheduler, proto) includes server/
Link rules (the transitive link closure CMake computed, LINK_GRAPH_FILE):
  strata_core, strata_kvcache and every strata_kernels_* library reach no engine, scheduler or
  server library; strata_scheduler does not link strata_engine.
Prints each violation as FILE:LINE or TARGET and exits 1 if there is any.
"""
import os
import re
import sys

PROJECT_DIRS = {"core", "kernels", "kvcache", "engine", "dist", "scheduler", "server", "proto",
                "clients", "tools", "tests", "bench", "deploy"}
BELOW_SERVER = ["core", "kernels", "kvcache", "engine", "dist", "scheduler", "proto"]
SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cuh", ".cpp", ".hpp")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# folder -> (allowed top-level folders, allowed exact headers from elsewhere)
INCLUDE_RULES = {
    "core": ({"core"}, set()),
    "kernels": ({"core", "kernels"}, set()),
    "kvcache": ({"core", "kvcache"}, set()),
    "scheduler": ({"core", "kvcache", "scheduler"},
                  {"engine/step.h", "engine/media_embedding.h", "engine/sampling.h"}),
}


def source_files(root, folder):
    for base, dirs, files in os.walk(os.path.join(root, folder)):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(base, name)


def project_includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m and m.group(1).split("/", 1)[0] in PROJECT_DIRS and "/" in m.group(1):
                yield number, m.group(1)


def include_violations(root):
    out = []
    for folder, (allowed_dirs, allowed_headers) in INCLUDE_RULES.items():
        for path in source_files(root, folder):
            for number, header in project_includes(path):
                top = header.split("/", 1)[0]
                if top not in allowed_dirs and header not in allowed_headers:
                    out.append(f"{os.path.relpath(path, root)}:{number}: {folder}/ includes "
                               f'"{header}"')
    for folder in BELOW_SERVER:
        for path in source_files(root, folder):
            for number, header in project_includes(path):
                if header.startswith("server/"):
                    out.append(f"{os.path.relpath(path, root)}:{number}: {folder}/ is below "
                               f'server/ and includes "{header}"')
    return out


def read_link_graph(path):
    """Lines `target: dep;dep;...` as CMake wrote them (LINK_LIBRARIES of each target)."""
    graph = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            name, _, deps = line.rstrip("\n").partition(": ")
            graph[name] = [d for d in deps.split(";") if d]
    return graph


def closure(graph, target):
    seen, stack = set(), list(graph.get(target, []))
    while stack:
        dep = stack.pop()
        dep = re.sub(r"^\$<LINK_ONLY:(.*)>$", r"\1", dep)
        if dep in seen:
            continue
        seen.add(dep)
        stack.extend(graph.get(dep, []))
    return seen


def link_violations(graph):
    out = []
    upper = re.compile(r"^strata_(engine|scheduler|cli|serve|grpc|http|frontend|metrics|batch|"
                       r"dist|engine_loop)")
    lower = ["strata_core", "strata_kvcache"] + sorted(
        t for t in graph if t.startswith("strata_kernels_"))
    for target in lower:
        if target not in graph:
            out.append(f"{target}: missing from the link graph")
            continue
        for dep in sorted(closure(graph, target)):
            if upper.match(dep):
                out.append(f"{target} links {dep}")
    if "strata_scheduler" not in graph:
        out.append("strata_scheduler: missing from the link graph")
    elif "strata_engine" in closure(graph, "strata_scheduler"):
        out.append("strata_scheduler links strata_engine")
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    root, graph_file = sys.argv[1], sys.argv[2]
    problems = include_violations(root) + link_violations(read_link_graph(graph_file))
    for p in problems:
        print(p)
    checked = sum(1 for folder in set(INCLUDE_RULES) | set(BELOW_SERVER)
                  for _ in source_files(root, folder))
    print(f"layering: {checked} files and the link graph checked, {len(problems)} violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
