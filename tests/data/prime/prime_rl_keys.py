"""How tests/data/prime/prime_rl_keys_*.txt were made: every key of prime-rl's RLConfig at a
commit, read from its source with Python's ast (nothing of prime-rl is imported), following
each field's annotation to the config classes it names (a union: all of them; `list[...]`
of a class: an array of tables, `[]`).

    python tests/data/prime/prime_rl_keys.py PRIME_RL_CHECKOUT COMMIT | grep -v ' :: TABLE' \
        | sed 's/ ::.*//'
"""
import ast, subprocess, sys
REPO, commit = sys.argv[1], sys.argv[2]
allf = subprocess.run(["git", "-C", REPO, "ls-tree", "-r", "--name-only", commit],
                      capture_output=True, text=True).stdout.split()
def modfile(mod):
    rel = mod.replace(".", "/")
    for f in allf:
        if f.endswith(rel + ".py") or f.endswith(rel + "/__init__.py"):
            if "/tests/" not in "/" + f: return f
    return None
trees = {}
def tree(f):
    if f not in trees:
        src = subprocess.run(["git", "-C", REPO, "show", f"{commit}:{f}"], capture_output=True, text=True).stdout
        trees[f] = ast.parse(src)
    return trees[f]
def scope(f):
    """local name -> ('class', file, node) | ('alias', file, expr)"""
    out = {}
    for node in tree(f).body:
        if isinstance(node, ast.ClassDef): out[node.name] = ("class", f, node)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("prime_rl"):
            mf = modfile(node.module)
            for a in node.names:
                if mf: out.setdefault(a.asname or a.name, ("import", mf, a.name))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            tgt = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(tgt, ast.Name) and node.value is not None:
                out[tgt.id] = ("alias", f, node.value)
    return out
scopes = {}
def lookup(f, name, depth=0):
    if f not in scopes: scopes[f] = scope(f)
    hit = scopes[f].get(name)
    if not hit or depth > 8: return None
    if hit[0] == "import": return lookup(hit[1], hit[2], depth + 1)
    return hit
def fields(f, node, seen=()):
    out = {}
    for b in node.bases:
        bn = ast.unparse(b).split("[")[0]
        hit = lookup(f, bn)
        if hit and hit[0] == "class" and (hit[1], bn) not in seen:
            out.update(fields(hit[1], hit[2], seen + ((hit[1], bn),)))
    for st in node.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and "ClassVar" not in ast.unparse(st.annotation):
            out[st.target.id] = (f, st.annotation)
    return out
def refs(f, ann, depth=0):
    classes, islist = [], False
    for n in ast.walk(ann):
        if isinstance(n, ast.Call): continue
        if isinstance(n, ast.Subscript) and ast.unparse(n.value) in ("list", "List"): islist = True
        if isinstance(n, ast.Name):
            hit = lookup(f, n.id)
            if hit and hit[0] == "class": classes.append((hit[1], hit[2]))
            elif hit and hit[0] == "alias" and depth < 5:
                c, l = refs(hit[1], hit[2], depth + 1); classes += c; islist |= l
    return classes, islist
def walk(cls, prefix, out, stack=()):
    merged = {}
    for f, node in cls:
        for k, v in fields(f, node).items(): merged.setdefault(k, []).append(v)
    for k, anns in merged.items():
        if k in ("model_config", "toml_files"): continue
        subs, islist = [], False
        for f, ann in anns:
            c, l = refs(f, ann); subs += c; islist |= l
        uniq = {}
        for f, n in subs:
            if fields(f, n) and (f, n.name) not in stack: uniq[(f, n.name)] = (f, n)
        key = prefix + k + ("[]" if islist and uniq else "")
        if uniq:
            out.append((key, "TABLE " + ",".join(n for _, n in uniq)))
            walk(list(uniq.values()), key + ".", out, stack + tuple(uniq))
        else:
            out.append((key, " | ".join(sorted({ast.unparse(a)[:90] for _, a in anns}))))
root = "RLConfig"
f0 = next(f for f in allf if f.endswith(("rl_config.py", "configs/rl.py")) and "tests" not in f)
hit = lookup(f0, root)
out = []
walk([(hit[1], hit[2])], "", out)
for k, t in out: print(k, "::", t)
