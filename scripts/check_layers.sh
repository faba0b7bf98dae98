#!/usr/bin/env bash
# The folders' dependency order, checked two ways: a file may include only headers of its own
# folder or of folders listed before it in ORDER, and may name (call, take the address of,
# declare) only functions and data defined in its own folder or below. The second catches
# what an include cannot show: a name declared in a low folder's header and defined higher
# up. A folder is a file's directory under engine/ (engine/backends/cpu is "backends/cpu"),
# else its top-level directory. KNOWN would list the upward edges still to break, each with
# why it exists; it is empty, and an entry that no longer occurs fails too, so it only
# shrinks. Usage: scripts/check_layers.sh [SRC]
set -u
src=${1:-$(dirname "$0")/..}
cd "$src" || exit 2
# low -> high. device is the interface every backend implements, with the recorder and the
# host pool; ops are the cpu kernels and sim the cost models the cpu and sim backends use;
# backends is the registry above those backends (and the CUDA module's loader); comm asks the
# registry for a device's capabilities and loads nccl through it; backends/cuda, the CUDA
# module, sits above comm because it implements a communicator too (nccl), and the engine
# reaches it only through the loader's table, never by linking.
ORDER="core device ops model sim backends/cpu backends/sim backends comm backends/cuda config strategies exec traces apps/common apps/calibrate apps/validate apps"
KNOWN="
"
python3 - "$ORDER" "$KNOWN" <<'PY'
import os, re, sys

order = sys.argv[1].split()
known = {l.split()[0] for l in sys.argv[2].splitlines() if l.split()}
rank = {f: i for i, f in enumerate(order)}
files = sorted(os.path.join(d, f) for top in ("engine", "strategies", "traces", "apps")
               for d, _, fs in os.walk(top) for f in fs if f.endswith((".c", ".h", ".cu", ".cuh")))

def folder_of(path):
    d = os.path.dirname(os.path.normpath(path))
    if d.startswith("engine/"):
        return d[len("engine/"):]
    parts = d.split("/")
    return "/".join(parts[:2]) if parts[0] == "apps" and len(parts) > 1 else parts[0]

INCLUDE_PATH = ("apps", "apps/common", ".")  # the apps' -I folders (CMakeLists.txt), then the root

def resolve(f, inc):
    """The file an #include "inc" in f names: beside f, else along the include path."""
    for d in (os.path.dirname(f),) + INCLUDE_PATH:
        path = os.path.relpath(os.path.normpath(os.path.join(d, inc)))
        if os.path.exists(path):
            return path
    return os.path.relpath(os.path.normpath(os.path.join(os.path.dirname(f), inc)))

def strip(text):
    """The code without comments, string and character literals (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)

code = {f: strip(open(f, encoding="utf-8", errors="replace").read()) for f in files}
raw = {f: open(f, encoding="utf-8", errors="replace").read() for f in files}

# Definitions with external linkage: a function body or an initialised object at file scope.
NOT_A_DEF = (r"static\b|typedef\b|extern\b(?!\s*\"\")|inline\b|template\b|__device__|__global__|"
             r"__host__|return\b|else\b|if\b|for\b|while\b|switch\b")
FUNC = re.compile(r"^(?!" + NOT_A_DEF + r')[A-Za-z_][\w \t\*"]*?\b([A-Za-z_]\w*)\s*\([^;{}]*\)\s*'
                  r"(?:__attribute__\(\(.*?\)\)\s*)?\{", re.M | re.S)
DATA = re.compile(r"^(?!static\b|typedef\b|extern\b)(?:const\s+)?(?:struct\s+)?\w+\s+(?:\*\s*)?"
                  r"(?:const\s+)?([A-Za-z_]\w*)\s*(?:\[[^\]]*\])?\s*=", re.M)
def depths(text):
    """Brace depth at every offset of stripped code; an extern "C" { block is file scope."""
    linkage = {m.end() - 1 for m in re.finditer(r'extern\s*""\s*\{', text)}
    d, stack, out = 0, [], []
    for i, c in enumerate(text):
        out.append(d)
        if c == "{":
            stack.append(i in linkage)
            d += i not in linkage
        elif c == "}" and stack:
            d -= not stack.pop()
    return out

defined = {}
for f in files:
    if not f.endswith((".c", ".cu")):
        continue
    depth = depths(code[f])
    for m in list(FUNC.finditer(code[f])) + list(DATA.finditer(code[f])):
        if depth[m.start()] == 0:
            defined.setdefault(m.group(1), set()).add(f)

fail, seen = False, set()

def upward(f, what, to):
    global fail
    frm = folder_of(f)
    if frm == to:
        return
    if frm not in rank or to not in rank:
        print(f"check_layers: {f} {what}: folder '{to}' or '{frm}' not in the order")
        fail = True
    elif rank[to] > rank[frm]:
        if f"{frm}>{to}" in known:
            seen.add(f"{frm}>{to}")
        else:
            print(f"check_layers: {f} ({frm}) {what} ({to}), which sits above it in: "
                  + " ".join(order))
            fail = True

IDENT = re.compile(r"\b[A-Za-z_]\w*\b")
for f in files:
    for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', raw[f], re.M):
        upward(f, f"includes {inc}", folder_of(resolve(f, inc)))
    names = set(IDENT.findall(code[f]))
    for name in sorted(names):
        where = defined.get(name)
        if not where or f in where:
            continue
        folders = {folder_of(d) for d in where}
        low = min(folders, key=lambda x: rank.get(x, len(order)))
        if folder_of(f) in folders:
            continue
        upward(f, f"names {name}, defined in {sorted(where)[0]}", low)

for k in sorted(known - seen):
    print(f"check_layers: '{k}' no longer occurs: remove it from KNOWN")
    fail = True
if not fail:
    print(f"check_layers: {' '.join(order)} (includes and names; known upward edges: "
          f"{' '.join(sorted(known)) or 'none'})")
sys.exit(1 if fail else 0)
PY
