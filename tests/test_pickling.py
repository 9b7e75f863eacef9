"""Generic functions, nr.jit functions, gradient objects, structs and tangents pickle (issue 18,
API.md 4c): in this process they come back as themselves; in another process, defined in a
``__main__`` script as a notebook defines them, they arrive with their methods, rules and
source, compute what they computed where they were made, and load the kernels that process
stored in the shared disk cache instead of compiling them."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import cloudpickle
import numpy as np
import pytest

import numbarules as nr
from numbarules import registry


@nr.generic
def here(x: nr.Vector[nr.Float64]):
    return np.sum(x * x)


@nr.struct
class Box(nr.Any):
    w: float
    v: nr.Vector[nr.Float64]


def test_objects_come_back_as_themselves_in_this_process():
    g, vg = nr.grad(here), nr.value_and_grad(here, argnums=(0,))
    j = nr.jit(lambda x: x + 1.0)
    for dumps in (pickle.dumps, cloudpickle.dumps):
        assert pickle.loads(dumps(here)) is here
        assert pickle.loads(dumps(g)) is g
        assert pickle.loads(dumps(vg)) is vg
        assert pickle.loads(dumps(nr.Vector[nr.Float64])) is nr.Vector[nr.Float64]
        assert pickle.loads(dumps(nr.Array[nr.Real, 3])) is nr.Array[nr.Real, 3]
    assert pickle.loads(cloudpickle.dumps(j)) is j
    t = nr.Tangent[Box](2.0, np.ones(2))
    back = pickle.loads(pickle.dumps(t))
    assert type(back) is nr.Tangent[Box] and back.w == 2.0


def test_compiled_tables_travel_empty():
    def f(x):
        return np.sum(np.sin(x))
    nr.grad(f)(np.ones(3))          # hangs compiled code on f (registry tables)
    assert any(isinstance(v, registry.Local) and v for v in vars(f).values())
    copy = pickle.loads(cloudpickle.dumps(f))
    assert all(not v for v in vars(copy).values() if isinstance(v, registry.Local))
    assert pickle.loads(pickle.dumps(registry.Local(a=1))) == {}


CLIENT = '''
import json, math, sys
import cloudpickle, numpy as np
import numbarules as nr

def helper(v):                                   # a plain function a method calls
    return np.sum(v * v)

@nr.generic
def energy(x: nr.Vector[nr.Float64], k: float):
    return k * helper(x)

@energy.method
def energy(x: nr.Matrix[nr.Float64], k: float):  # calls the generic function again
    s = 0.0
    for i in range(x.shape[0]):
        s += energy(x[i], k)
    return s

@nr.generic
def soft(x: float):
    return math.sin(x)

@nr.rrule(soft)
def _(x: float):
    def soft_pullback(dy):
        return (3.0 * dy * math.cos(x),)         # not sin's derivative: the rule must travel
    return math.sin(x), soft_pullback

def loss(x, k):
    return energy(x, k) + soft(x[0])

@nr.struct
class Spring(nr.Any):
    k: float
    x0: nr.Vector[nr.Float64]

@nr.jit
def stretch(s, x):
    return s.k * np.sum((x - s.x0) ** 2)

x = np.array([0.3, -1.2, 2.0])
M = np.arange(6.0).reshape(2, 3) / 7.0
objs = {"loss": nr.grad(loss, argnums=(0, 1)), "energy": nr.value_and_grad(energy),
        "stretch": nr.grad(stretch, argnums=(0, 1)), "spring": Spring(2.0, np.ones(3)),
        "generic": energy}

def run(objs):
    sg, xg = objs["stretch"](objs["spring"], x)
    return {"loss": [list(a) if np.ndim(a) else a for a in objs["loss"](x, 2.0)],
            "energy": [objs["energy"](M, 0.5)[0], objs["energy"](M, 0.5)[1].tolist()],
            "stretch": [sg.k, list(sg.x0), list(xg)], "spring_type": type(sg).__name__}

first = run(objs)
with open(sys.argv[1], "wb") as fh:
    fh.write(cloudpickle.dumps(objs))

@energy.method
def energy(x: nr.Matrix[nr.Float64], k: float):  # replaces the matrix method
    return 2.0 * k * np.sum(x * x)

second = objs["energy"](M, 0.5)
with open(sys.argv[2], "wb") as fh:
    fh.write(cloudpickle.dumps(objs["energy"]))
print(json.dumps({"first": first, "second": [second[0], second[1].tolist()]}))
'''

WORKER = '''
import json, pickle, sys
import numpy as np
with open(sys.argv[1], "rb") as fh:
    objs = pickle.load(fh)
import numbarules as nr
x = np.array([0.3, -1.2, 2.0])
M = np.arange(6.0).reshape(2, 3) / 7.0
loss = [list(a) if np.ndim(a) else a for a in objs["loss"](x, 2.0)]
energy = objs["energy"](M, 0.5)
before_structs = nr.cache_info()["compiles"]
sg, xg = objs["stretch"](objs["spring"], x)
first = {"loss": loss, "energy": [energy[0], energy[1].tolist()],
         "stretch": [sg.k, list(sg.x0), list(xg)], "spring_type": type(sg).__name__}
with open(sys.argv[2], "rb") as fh:
    again = pickle.load(fh)
same = again is objs["energy"] and again.f is objs["generic"]
second = again(M, 0.5)
print(json.dumps({"first": first, "second": [second[0], second[1].tolist()], "same": same,
                  "compiles_before_structs": before_structs,
                  "invalidations": nr.cache_info()["invalidations"]}))
'''


def _flat(v):
    if isinstance(v, (list, tuple)):
        return np.concatenate([_flat(x) for x in v]) if v else np.zeros(0)
    return np.ravel(np.asarray(v, dtype=float))


def test_a_notebooks_objects_work_in_another_process(tmp_path):
    (tmp_path / "client.py").write_text(textwrap.dedent(CLIENT))
    (tmp_path / "worker.py").write_text(textwrap.dedent(WORKER))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = dict(os.environ, NUMBARULES_CACHE="1", NUMBARULES_CACHE_DIR=str(tmp_path / "cache"))
    one, two = str(tmp_path / "one.pkl"), str(tmp_path / "two.pkl")

    def run(script, cwd):
        done = subprocess.run([sys.executable, str(tmp_path / script), one, two], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    client = run("client.py", tmp_path)
    # The worker runs elsewhere with another __main__; its copy of the client's script is gone
    # (as a notebook's cells are): only the pickled lines can give it the source.
    (tmp_path / "client.py").unlink()
    worker = run("worker.py", elsewhere)
    assert worker["first"]["spring_type"] == client["first"]["spring_type"] == "Tangent_Spring"
    for key in ("loss", "energy", "stretch"):
        np.testing.assert_allclose(_flat(worker["first"][key]), _flat(client["first"][key]),
                                   rtol=1e-13, atol=0)
    x = np.array([0.3, -1.2, 2.0])
    want = 2.0 * 2.0 * x
    want[0] += 3.0 * np.cos(0.3)            # the rule's pullback came along
    np.testing.assert_allclose(client["first"]["loss"][0], want, rtol=1e-13)
    # the method the client added after the first pickle replaced the worker's copy
    assert worker["same"] is True
    assert worker["invalidations"] >= 1
    np.testing.assert_allclose(_flat(worker["second"]), _flat(client["second"]), rtol=1e-13,
                               atol=0)
    M = np.arange(6.0).reshape(2, 3) / 7.0
    np.testing.assert_allclose(client["second"][1], 2.0 * M, rtol=1e-13)
    # Kernels over plain arrays and generic functions came from the client's disk cache (a
    # struct defined in __main__ arrives as a class of the same name, not the client's: its
    # kernels are compiled again).
    assert worker["compiles_before_structs"] == 0


@nr.generic
def spread(x: nr.Vector[nr.Float64]):
    return np.sum(x ** 3)


def spread_of_matrix(x: nr.Matrix[nr.Float64]):      # added as a method at run time
    return np.sum(x * x)


def test_a_process_pool_sees_the_methods_added_here():
    """multiprocessing pickles with the standard pickle (by reference): the child imports this
    module, whose ``spread`` has one method; the method added here reaches it all the same."""
    import concurrent.futures
    import multiprocessing
    spread.method(spread_of_matrix)     # spread is this test's own
    xs = [np.arange(3.0) + i for i in range(3)] + [np.ones((2, 2)) * 3.0]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        out = list(pool.map(nr.grad(spread), xs))
    for x, g in zip(xs[:3], out):
        np.testing.assert_allclose(g, 3.0 * x ** 2, rtol=1e-13)
    np.testing.assert_allclose(out[3], 2.0 * xs[3], rtol=1e-13)


def test_a_process_whose_module_differs_refuses_instead_of_computing_other_code(make_module):
    """pickle names a module's function; the child imports the module afresh. When the parent
    changed a global of it since, the child's function is not the code the parent
    differentiated: an error, not a gradient of other code."""
    import concurrent.futures
    import multiprocessing
    mod = make_module("nr_pickled_scale", "import numpy as np\nK = 1.0\n\n"
                                          "def f(x):\n    return K * np.sum(x * x)\n")
    ctx = multiprocessing.get_context("spawn")
    x = np.arange(3.0)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        np.testing.assert_allclose(pool.submit(nr.grad(mod.f), x).result(), 2.0 * x)
        mod.K = 5.0
        assert nr.grad(mod.f)(x).tolist() == (10.0 * x).tolist()
        with pytest.raises(nr.NumbarulesError, match="is not, in this process, the code"):
            pool.submit(nr.grad(mod.f), x).result()
