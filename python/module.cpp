/// \file module.cpp
/// \brief flash_steps._native: every built step, the fp64 reference and the tolerance rule, for Python.
///
/// The compiled half of the `flash_steps` package (python/flash_steps/ is the
/// other half, in Python). It binds what the C++ programs use:
///
/// - `steps()`: every step built in this tree (the tour's list), each a `Step`
///   with its StepInfo's fields and two ways to run it:
///   `forward(q, k, v, ...)` on NumPy arrays (any step: a GPU step uploads and
///   downloads through its session) and, for GPU steps, `launch(q, k, v, o,
///   lse, workspace, ...)` on CUDA tensors lent through DLPack (GpuKernel::launch
///   on the caller's memory and stream, no copy);
/// - for the steps with a backward pass, `backward(q, k, v, o, lse, d_o, ...)` on
///   NumPy arrays (a GPU step through its backward session) and, for GPU steps,
///   `launch_backward(...)` on CUDA tensors (GpuKernel::launch_backward, no copy);
/// - `reference_attention` and `check_result`: the fp64 reference and
///   FlashAttention-2's tolerance rule of common/reference.hpp, so that Python
///   tests judge a step by the same rule as the C++ tests; `reference_backward`
///   and `check_gradients`, the same for gradients (common/reference_backward.hpp);
/// - the errors: common::InputError is `InputError`, a ValueError;
///   common::NoGpuError is `NoGpuError`, a RuntimeError; CUDA errors are
///   RuntimeErrors; a wrong type or dtype is a TypeError. Each carries the
///   steps' one-line message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/driver.hpp"
#include "common/host_timing.hpp"
#include "common/reference.hpp"
#include "common/reference_backward.hpp"
#include "common/step.hpp"
#include "host_arrays.hpp"
#include "tour_steps.hpp"
#if FLASH_HAVE_CUDA
#include "dlpack_tensors.hpp"
#endif

namespace flash_python {

namespace {

/// Runs `step` on NumPy arrays and returns (o, lse) as NumPy arrays. Every step
/// takes this path: a GPU step uploads once, launches and downloads once.
/// `dtype` is the precision to compute in, as the programs' --dtype spells it
/// (None: the step's own); float32 in and out whatever it is: a bf16/fp16 step
/// rounds Q, K and V once on upload and O comes back widened.
py::tuple forward_arrays(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, py::handle causal,
                         py::handle scale, py::handle sram_floats, py::handle dtype) {
  common::Options options;
  options.sram_floats = sram_floats_arg(sram_floats);
  const std::optional<std::string> precision = dtype_arg(dtype);
  options.precision = precision ? common::parse_precision(*precision) : step.precisions.front();
  common::require_precision(step, options.precision);  // before anything is copied
  // The programs' memory check, before the inputs are copied: S of step 1 at
  // N = 2^18 is 256 GiB, refused here rather than tried.
  const auto fits = [&step](const common::Shape& shape) { common::require_host_memory(step, shape, false); };
  const common::Problem problem = problem_from_arrays(q, k, v, causal_arg(causal), scale_arg(scale), fits);
  common::Result result;
  {
    py::gil_scoped_release release;  // minutes for the simulator of step 3: other threads may run
    result = step.forward(problem, options);
  }
  // Finite inputs can overflow float32 inside a step (scale*q.k beyond 3.4e38):
  // the programs warn, and so does this, with their words, as a RuntimeWarning.
  if (const std::string overflow = common::nonfinite_message(result); !overflow.empty()) {
    const std::string text = step.name + ": " + overflow;
    if (PyErr_WarnEx(PyExc_RuntimeWarning, text.c_str(), 1) != 0) throw py::error_already_set();  // -W error
  }
  return py::make_tuple(to_array(std::move(result.o), o_dims(problem.shape)),
                        to_array(std::move(result.lse), lse_dims(problem.shape)));
}

/// The memory check of the fp64 reference and the check, as the programs' --check.
void require_check_memory(const common::Shape& shape) { common::require_host_memory({}, shape, true); }

/// O and L of fp64 standard attention on NumPy arrays: (o, lse) as float64 arrays.
py::tuple reference(py::handle q, py::handle k, py::handle v, py::handle causal, py::handle scale) {
  const common::Problem problem =
      problem_from_arrays(q, k, v, causal_arg(causal), scale_arg(scale), require_check_memory);
  common::Reference ref;
  {
    py::gil_scoped_release release;
    ref = common::reference_attention(problem);
  }
  return py::make_tuple(to_array(std::move(ref.o), o_dims(problem.shape)),
                        to_array(std::move(ref.lse), lse_dims(problem.shape)));
}

/// The tolerance rule's verdict on (o, lse) for these inputs.
common::Verdict check(py::handle q, py::handle k, py::handle v, py::handle o, py::handle lse, py::handle causal,
                      py::handle scale) {
  const common::Problem problem =
      problem_from_arrays(q, k, v, causal_arg(causal), scale_arg(scale), require_check_memory);
  const common::Result result = result_from_arrays(o, lse, problem.shape);
  py::gil_scoped_release release;
  return common::check_result(problem, result);
}

/// InputError unless `step` has a backward pass, naming the built steps that have one.
void require_backward(const common::StepInfo& step) {
  if (step.backward) return;
  std::string with;
  for (const common::StepInfo& s : tour::built_steps()) {
    if (s.backward) with += (with.empty() ? "" : ", ") + s.name;
  }
  throw common::InputError(step.name +
                           " has no backward pass; the built steps with one: " + (with.empty() ? "none" : with));
}

/// Runs `step`'s backward pass on NumPy arrays and returns (dq, dk, dv) as float32
/// NumPy arrays: a CPU step directly, a GPU step through its backward session
/// (uploads once, launches, downloads once). `dtype` as for forward_arrays: a
/// bf16/fp16 step rounds Q, K, V, O and dO once on upload and its gradients come
/// back widened. `deterministic`: sum dQ in a fixed order, for the steps that offer
/// the choice (has_deterministic_option); refused by the others, as the programs
/// offer no --deterministic there.
py::tuple backward_arrays(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, py::handle o,
                          py::handle lse, py::handle d_o, py::handle causal, py::handle scale, py::handle sram_floats,
                          py::handle dtype, py::handle deterministic) {
  require_backward(step);
  common::Options options;
  options.sram_floats = sram_floats_arg(sram_floats);
  options.deterministic = bool_arg(deterministic, "deterministic");
  if (options.deterministic && !step.has_deterministic_option && !step.gpu) {  // a GPU step's session says why
    throw common::InputError(step.name +
                             " sums dQ in one fixed order always; deterministic=True is for the steps "
                             "whose dQ is summed by atomics (has_deterministic_option)");
  }
  const std::optional<std::string> precision = dtype_arg(dtype);
  options.precision = precision ? common::parse_precision(*precision) : step.precisions.front();
  common::require_precision(step, options.precision);
  // The programs' memory check for --backward, before anything is copied.
  const auto fits = [&step](const common::Shape& shape) { common::require_host_memory(step, shape, false, true); };
  const common::Problem problem = problem_from_arrays(q, k, v, causal_arg(causal), scale_arg(scale), fits);
  const common::BackwardInputs inputs = backward_inputs_from_arrays(o, lse, d_o, problem.shape);
  common::Gradients g;
  {
    py::gil_scoped_release release;  // minutes for a large problem on the CPU: other threads may run
    const std::unique_ptr<common::BackwardSession> session =
        common::open_backward_session(step, problem, inputs, options);
    session->run();
    g = session->gradients();
  }
  // Finite inputs can overflow float32 inside a backward: warned, as the programs do.
  const auto finite = [](const std::vector<float>& x) {
    return std::all_of(x.begin(), x.end(), [](float e) { return std::isfinite(e); });
  };
  if (!finite(g.dq) || !finite(g.dk) || !finite(g.dv)) {
    const std::string text =
        step.name + ": some gradients are not finite: these inputs overflow float32 inside the backward";
    if (PyErr_WarnEx(PyExc_RuntimeWarning, text.c_str(), 1) != 0) throw py::error_already_set();  // -W error
  }
  const common::Shape& s = problem.shape;
  return py::make_tuple(to_array(std::move(g.dq), o_dims(s)), to_array(std::move(g.dk), kv_dims(s)),
                        to_array(std::move(g.dv), kv_dims(s)));
}

/// The memory check of the fp64 gradients and their check, as the programs' --check --backward.
void require_gradient_check_memory(const common::Shape& shape) { common::require_host_memory({}, shape, true, true); }

/// dQ, dK, dV of fp64 standard attention for upstream gradient `d_o`, as float64 arrays.
py::tuple reference_gradients(py::handle q, py::handle k, py::handle v, py::handle d_o, py::handle causal,
                              py::handle scale) {
  const common::Problem problem =
      problem_from_arrays(q, k, v, causal_arg(causal), scale_arg(scale), require_gradient_check_memory);
  const common::Shape& s = problem.shape;
  const std::vector<float> upstream = d_o_from_array(d_o, s);
  common::ReferenceGradients ref;
  {
    py::gil_scoped_release release;
    ref = common::reference_backward(problem, upstream);
  }
  return py::make_tuple(to_array(std::move(ref.dq), o_dims(s)), to_array(std::move(ref.dk), kv_dims(s)),
                        to_array(std::move(ref.dv), kv_dims(s)));
}

/// The gradient rule's verdict on (dq, dk, dv) for these inputs and dO, in `dtype`'s precision.
common::GradientVerdict check_gradients(py::handle q, py::handle k, py::handle v, py::handle d_o, py::handle dq,
                                        py::handle dk, py::handle dv, py::handle causal, py::handle scale,
                                        py::handle dtype) {
  const std::optional<std::string> precision_name = dtype_arg(dtype);
  const common::Precision precision =
      precision_name ? common::parse_precision(*precision_name) : common::Precision::fp32;
  const common::Problem problem =
      problem_from_arrays(q, k, v, causal_arg(causal), scale_arg(scale), require_gradient_check_memory);
  const common::Shape& s = problem.shape;
  const std::vector<float> upstream = d_o_from_array(d_o, s);
  const common::Gradients gradients = gradients_from_arrays(dq, dk, dv, s);
  py::gil_scoped_release release;
  return common::check_gradients(problem, upstream, gradients, precision);
}

/// Registers C++ exception E as the Python exception `name`, a subclass of
/// `base`, in module `m`. pybind11's register_exception keeps the Python type in
/// a function-local static py::object, whose destructor runs at process exit,
/// after the interpreter has finalised (a Py_DECREF on a dead interpreter, which
/// pybind11 2.12's notes call undefined behaviour). Here the type is held by a
/// reference never given back, as CPython holds its own exception types, and
/// the translator raises it with PyErr_SetString.
template <class E>
void register_error(py::module_& m, const char* name, PyObject* base) {
  static PyObject* type = nullptr;  // one registration per E: the module is initialised once
  const std::string qualified = std::string(py::str(m.attr("__name__"))) + "." + name;
  type = PyErr_NewException(qualified.c_str(), base, nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  py::register_exception_translator([](std::exception_ptr thrown) {
    if (!thrown) return;
    try {
      std::rethrow_exception(thrown);
    } catch (const E& error) {
      PyErr_SetString(type, error.what());
    }
  });
}

}  // namespace

}  // namespace flash_python

/// The module. Docstrings are what `help(flash_steps)` shows.
PYBIND11_MODULE(_native, m) {
  namespace py = pybind11;
  m.doc() = "FlashAttention, step by step: the compiled half of flash_steps (see python/flash_steps/__init__.py).";

#if PYBIND11_VERSION_MAJOR == 2 && PYBIND11_VERSION_MINOR < 12
  // pybind11 before 2.12 reads NumPy 1's layout of an array descriptor: under
  // NumPy 2 its dtype().itemsize() reads another field, and the arrays made from
  // a step's O and L get wrong strides. Refuse to load rather than hand those out.
  {
    const std::string numpy_version = py::str(py::module_::import("numpy").attr("__version__"));
    if (std::stoi(numpy_version) >= 2) {
      throw py::import_error("flash_steps._native was built with pybind11 " PYBIND11_TOSTRING(
          PYBIND11_VERSION_MAJOR) "." PYBIND11_TOSTRING(PYBIND11_VERSION_MINOR) ", which reads NumPy 1's array "
                             "layout, and this Python has NumPy " + numpy_version +
                             "; rebuild with pybind11 >= 2.12 (python/CMakeLists.txt: FLASH_PYBIND11_INCLUDE) or "
                             "use numpy<2");
    }
  }
#endif

  // NoGpuError last: pybind11 tries the translators registered last first.
  flash_python::register_error<common::InputError>(m, "InputError", PyExc_ValueError);
  flash_python::register_error<common::NoGpuError>(m, "NoGpuError", PyExc_RuntimeError);

  py::class_<common::Shape>(m, "Shape", "Sizes of one problem: Q is (B, H, N_q, d), K and V are (B, H, N_kv, d).")
      .def(py::init([](int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, int64_t head_dim) {
             const common::Shape shape{batch, heads, seq_q, seq_kv, head_dim};
             common::validate(shape);
             return shape;
           }),
           py::arg("batch"), py::arg("heads"), py::arg("seq_q"), py::arg("seq_kv"), py::arg("head_dim"))
      .def_readonly("batch", &common::Shape::batch, "B")
      .def_readonly("heads", &common::Shape::heads, "H")
      .def_readonly("seq_q", &common::Shape::seq_q, "N_q")
      .def_readonly("seq_kv", &common::Shape::seq_kv, "N_kv")
      .def_readonly("head_dim", &common::Shape::head_dim, "d")
      .def("__repr__", [](const common::Shape& s) { return "Shape(" + common::describe(s) + ")"; });

  py::class_<common::Verdict>(m, "Verdict", "The tolerance rule's verdict (common::check_result).")
      .def_readonly("passed", &common::Verdict::passed, "every output finite and both errors within tolerance")
      .def_readonly("failure", &common::Verdict::failure, "why it failed, in one line (empty when passed)")
      .def_property_readonly("max_err_o", [](const common::Verdict& v) { return v.errors.max_err_o; })
      .def_property_readonly("max_err_lse", [](const common::Verdict& v) { return v.errors.max_err_lse; })
      .def_property_readonly(
          "baseline_o", [](const common::Verdict& v) { return v.baseline.max_err_o; },
          "max error of O of fp32 standard attention on the same inputs")
      .def_property_readonly("baseline_lse", [](const common::Verdict& v) { return v.baseline.max_err_lse; })
      .def_property_readonly(
          "tolerance_o", [](const common::Verdict& v) { return v.tolerance.o; }, "2 x baseline_o + 1e-6")
      .def_property_readonly("tolerance_lse", [](const common::Verdict& v) { return v.tolerance.lse; })
      .def("__bool__", [](const common::Verdict& v) { return v.passed; })
      .def("__repr__", [](const common::Verdict& v) {
        return std::string(v.passed ? "Verdict(passed" : "Verdict(FAILED: " + v.failure) +
               ", max_err_o=" + std::to_string(v.errors.max_err_o) + " <= " + std::to_string(v.tolerance.o) +
               ", max_err_lse=" + std::to_string(v.errors.max_err_lse) + " <= " + std::to_string(v.tolerance.lse) + ")";
      });

  py::class_<common::GradientVerdict>(m, "GradientVerdict", "The gradient rule's verdict (common::check_gradients).")
      .def_readonly("passed", &common::GradientVerdict::passed, "every gradient finite and each error within tolerance")
      .def_readonly("failure", &common::GradientVerdict::failure, "why it failed, in one line (empty when passed)")
      .def_property_readonly("max_err_dq", [](const common::GradientVerdict& v) { return v.errors.dq; })
      .def_property_readonly("max_err_dk", [](const common::GradientVerdict& v) { return v.errors.dk; })
      .def_property_readonly("max_err_dv", [](const common::GradientVerdict& v) { return v.errors.dv; })
      .def_property_readonly(
          "baseline_dq", [](const common::GradientVerdict& v) { return v.baseline.dq; },
          "max error of dQ of standard attention's gradients in the same precision")
      .def_property_readonly("baseline_dk", [](const common::GradientVerdict& v) { return v.baseline.dk; })
      .def_property_readonly("baseline_dv", [](const common::GradientVerdict& v) { return v.baseline.dv; })
      .def_property_readonly(
          "tolerance_dq", [](const common::GradientVerdict& v) { return v.tolerance.dq; },
          "2 x baseline_dq + the floor")
      .def_property_readonly("tolerance_dk", [](const common::GradientVerdict& v) { return v.tolerance.dk; })
      .def_property_readonly("tolerance_dv", [](const common::GradientVerdict& v) { return v.tolerance.dv; })
      .def("__bool__", [](const common::GradientVerdict& v) { return v.passed; })
      .def("__repr__", [](const common::GradientVerdict& v) {
        return std::string(v.passed ? "GradientVerdict(passed" : "GradientVerdict(FAILED: " + v.failure) +
               ", max_err_dq=" + std::to_string(v.errors.dq) + " <= " + std::to_string(v.tolerance.dq) +
               ", max_err_dk=" + std::to_string(v.errors.dk) + " <= " + std::to_string(v.tolerance.dk) +
               ", max_err_dv=" + std::to_string(v.errors.dv) + " <= " + std::to_string(v.tolerance.dv) + ")";
      });

  auto step = py::class_<common::StepInfo>(m, "Step", "One step of the tutorial, as the programs see it (StepInfo).");
  step.def_readonly("name", &common::StepInfo::name, "directory name, e.g. 'step06_fa2'")
      .def_readonly("title", &common::StepInfo::title, "one line: what the step adds")
      .def_readonly("needs_gpu", &common::StepInfo::needs_gpu, "runs on a CUDA GPU")
      .def_readonly("head_dims", &common::StepInfo::head_dims, "supported d (empty: any d >= 1)")
      .def_property_readonly(
          "compute_capability", [](const common::StepInfo& s) { return s.gpu ? s.gpu->compute_capability : 0; },
          "the one GPU generation its machine code runs on, major*10 + minor (90: Hopper); 0: any")
      .def_readonly("uses_sram_budget", &common::StepInfo::uses_sram_budget, "tiles come from an SRAM budget M")
      .def_readonly("default_sram_floats", &common::StepInfo::default_sram_floats, "M when none is given")
      .def_property_readonly("dtypes", &flash_python::step_dtypes,
                             "the dtypes of the CUDA tensors it takes, one per precision, its own first:\n"
                             "['float32'] or ['bfloat16', 'float16'] (NumPy arrays are float32 for every step)")
      .def_property_readonly(
          "precisions",
          [](const common::StepInfo& s) {
            std::vector<std::string> names;
            for (common::Precision p : s.precisions) names.emplace_back(common::name(p));
            return names;
          },
          "the precisions it computes in (the programs' --dtype), its own first: ['fp32']")
      .def("forward", &flash_python::forward_arrays, py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(),
           py::arg("causal") = false, py::arg("scale") = py::none(), py::arg("sram_floats") = 0,
           py::arg("dtype") = py::none(),
           "(o, lse) for float32 NumPy arrays q, k, v [B, H, N, d] (any strides: copied). Any step; a GPU step\n"
           "uploads, launches once and downloads. sram_floats: the budget M of steps that use one (0: default).\n"
           "dtype: the precision to compute in, 'fp32', 'bf16' or 'fp16' (None: the step's own, precisions[0]);\n"
           "one the step does not compute in is refused. Arrays in and out stay float32 (O widened).")
      .def_property_readonly(
          "has_backward", [](const common::StepInfo& s) { return bool(s.backward); },
          "has a backward pass (backward(), and launch_backward() for GPU steps)")
      .def_readonly("extends", &common::StepInfo::extends,
                    "backward steps: the forward step this one extends, e.g. 'step08_fa2_pipelined' ('' otherwise)")
      .def_readonly("has_deterministic_option", &common::StepInfo::has_deterministic_option,
                    "backward steps: deterministic=True sums dQ in a fixed order (instead of by atomics)")
      .def("backward", &flash_python::backward_arrays, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"),
           py::arg("lse"), py::arg("d_o"), py::kw_only(), py::arg("causal") = false, py::arg("scale") = py::none(),
           py::arg("sram_floats") = 0, py::arg("dtype") = py::none(), py::arg("deterministic") = false,
           "(dq, dk, dv) for float32 NumPy arrays q [B, H, N_q, d], k, v [B, H, N_kv, d], the forward's\n"
           "o [B, H, N_q, d] and lse [B, H, N_q], and d_o = dloss/dO [B, H, N_q, d] (any strides: copied).\n"
           "Steps with a backward pass only (has_backward); a GPU step uploads, launches once and downloads.\n"
           "dtype as for forward(); deterministic: sum dQ in a fixed order (has_deterministic_option steps).")
      .def(
          "backward_workspace_bytes",
          [](const common::StepInfo& s, const common::Shape& shape, py::handle deterministic) -> int64_t {
            const bool fixed_order = flash_python::bool_arg(deterministic, "deterministic");
            return s.gpu && s.gpu->backward_workspace_bytes ? s.gpu->backward_workspace_bytes(shape, fixed_order) : 0;
          },
          py::arg("shape"), py::arg("deterministic") = false,
          "bytes of device memory launch_backward() needs as `workspace` (0: none)")
      .def_property_readonly(
          "needs_workspace", [](const common::StepInfo& s) { return s.gpu && s.gpu->workspace_bytes != nullptr; },
          "launch() may need device memory besides O and L (workspace_bytes(shape, causal) says how much)")
      .def(
          "workspace_bytes",
          [](const common::StepInfo& s, const common::Shape& shape, py::handle causal) -> int64_t {
            const bool masked = flash_python::causal_arg(causal);
            return s.gpu && s.gpu->workspace_bytes ? s.gpu->workspace_bytes(shape, masked) : 0;
          },
          py::arg("shape"), py::arg("causal") = false,
          "bytes of device memory launch() needs as `workspace` for that shape and mask (0: none)")
      .def("__repr__", [](const common::StepInfo& s) { return "<Step " + s.name + ": " + s.title + ">"; });

  m.def(
      "steps", [] { return tour::built_steps(); }, "every step built in this tree, in teaching order");
  m.def("host_timing", &common::set_host_timing, py::arg("on"),
        "times the host phases of each launch from now on (True) or no longer (False); see host_times()");
  m.def(
      "host_times",
      [] {
        py::dict by_phase;
        for (const auto& [phase, total] : common::take_host_times()) {
          by_phase[py::str(phase)] = py::make_tuple(total.calls, double(total.nanoseconds) * 1e-3);
        }
        return by_phase;
      },
      "{phase: (calls, microseconds in all)} of the host phases timed since the last call (which\n"
      "starts the totals again); empty unless host_timing(True) or FLASH_STEPS_HOST_TIMING=1");
  if (const char* env = std::getenv("FLASH_STEPS_HOST_TIMING"); env != nullptr && std::string(env) == "1") {
    common::set_host_timing(true);
  }
  m.def(
      "unbuilt_steps", [] { return tour::unbuilt_steps(); },
      "steps whose directory exists but that this build left out (no CUDA compiler)");
  m.def("reference_attention", &flash_python::reference, py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(),
        py::arg("causal") = false, py::arg("scale") = py::none(),
        "(o, lse) of standard attention in fp64 (common::reference_attention) for float32 NumPy arrays");
  m.def("reference_backward", &flash_python::reference_gradients, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("d_o"), py::kw_only(), py::arg("causal") = false, py::arg("scale") = py::none(),
        "(dq, dk, dv) of standard attention in fp64 (common::reference_backward) for float32 NumPy arrays\n"
        "q, k, v and the upstream gradient d_o = dloss/dO; it recomputes the forward itself");
  m.def("check_gradients", &flash_python::check_gradients, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("d_o"),
        py::arg("dq"), py::arg("dk"), py::arg("dv"), py::kw_only(), py::arg("causal") = false,
        py::arg("scale") = py::none(), py::arg("dtype") = py::none(),
        "the gradient rule's GradientVerdict on (dq, dk, dv): each max error against the fp64 gradients at\n"
        "most 2 x that of standard attention's gradients in the same precision (dtype: 'fp32', 'bf16',\n"
        "'fp16'; None: fp32) on the same inputs + a floor (common::check_gradients)");
  m.def("check_result", &flash_python::check, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"), py::arg("lse"),
        py::kw_only(), py::arg("causal") = false, py::arg("scale") = py::none(),
        "the tolerance rule's Verdict on (o, lse): max error against the fp64 reference at most\n"
        "2 x that of fp32 standard attention on the same inputs + 1e-6 (common::check_result)");

#if FLASH_HAVE_CUDA
  m.attr("cuda_built") = true;
  m.def("gpu_available", &flash_python::gpu_available, "a CUDA GPU can be used");
  step.def(
      "check_inputs",
      [](const common::StepInfo& s, py::handle q, py::handle k, py::handle v, std::optional<int64_t> stream) {
        return flash_python::check_inputs(s, q, k, v, stream);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(), py::arg("stream") = py::none(),
      "the Shape of CUDA tensors q, k, v, checked as launch() checks them (before outputs are allocated)");
  step.def(
      "launch",
      [](const common::StepInfo& s, py::handle q, py::handle k, py::handle v, py::handle o, py::handle lse,
         py::handle workspace, py::handle causal, py::handle scale, std::optional<int64_t> stream, bool check_finite) {
        flash_python::launch(s, q, k, v, o, lse, workspace, flash_python::causal_arg(causal),
                             flash_python::scale_arg(scale), stream, check_finite);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"), py::arg("lse"), py::arg("workspace") = py::none(),
      py::kw_only(), py::arg("causal") = false, py::arg("scale") = py::none(), py::arg("stream") = py::none(),
      py::arg("check_finite") = false,
      "Enqueues the step's kernel on CUDA tensors lent through DLPack (no copy): reads q, k, v\n"
      "[B, H, N, d] of one of the step's dtypes (float32, bfloat16, float16: the precision it computes\n"
      "in), writes o [B, H, N_q, d] of q's dtype and lse [B, H, N_q] float32 in place. stream: the\n"
      "cudaStream_t to run on, as an integer (None or 0: the legacy default stream); each tensor's\n"
      "__dlpack__(stream=...) makes it wait for the tensor's producer. Not waited for.\n"
      "check_finite: refuse NaN or infinity in q, k, v first (a wait for the stream).");
  step.def(
      "launch_backward",
      [](const common::StepInfo& s, py::handle q, py::handle k, py::handle v, py::handle o, py::handle lse,
         py::handle d_o, py::handle dq, py::handle dk, py::handle dv, py::handle workspace, py::handle causal,
         py::handle scale, py::handle deterministic, std::optional<int64_t> stream) {
        flash_python::require_backward(s);
        const bool fixed_order = flash_python::bool_arg(deterministic, "deterministic");
        flash_python::launch_backward(s, q, k, v, o, lse, d_o, dq, dk, dv, workspace, flash_python::causal_arg(causal),
                                      flash_python::scale_arg(scale), fixed_order, stream);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("o"), py::arg("lse"), py::arg("d_o"), py::arg("dq"),
      py::arg("dk"), py::arg("dv"), py::arg("workspace") = py::none(), py::kw_only(), py::arg("causal") = false,
      py::arg("scale") = py::none(), py::arg("deterministic") = false, py::arg("stream") = py::none(),
      "Enqueues the step's backward pass on CUDA tensors lent through DLPack (no copy): reads q, k, v,\n"
      "o, d_o of one of the step's dtypes and lse float32, as launch() takes and writes them, and writes\n"
      "dq [B, H, N_q, d], dk, dv [B, H, N_kv, d] of q's dtype in place. workspace: at least\n"
      "backward_workspace_bytes(shape, deterministic) bytes. stream as for launch(). Not waited for;\n"
      "the inputs are not scanned for NaN (use backward() on NumPy arrays for that).");
  m.def("device_of", &flash_python::device_of, py::arg("tensor"), "the CUDA device id of a DLPack tensor");
  m.def("dtype_of", &flash_python::dtype_of, py::arg("tensor"), py::kw_only(), py::arg("stream") = py::none(),
        "'float32', 'bfloat16', 'float16' (or DLPack's name of another): the dtype of a CUDA tensor");
  m.def("synchronize", &flash_python::synchronize, py::arg("stream") = py::none(),
        "waits for the work enqueued on `stream` (an integer handle; None: the legacy default stream)");
  py::class_<flash_python::DeviceArray>(m, "DeviceArray",
                                        "device memory owned by this module, lent through DLPack: outputs for\n"
                                        "frameworks the package cannot allocate with (pass it to from_dlpack)")
      .def(py::init<std::vector<int64_t>, int, std::string>(), py::arg("shape"), py::arg("device") = 0,
           py::arg("dtype") = "float32", "uninitialised; dtype: 'float32', 'bfloat16' or 'float16'")
      .def_property_readonly("shape", [](const flash_python::DeviceArray& a) { return py::tuple(py::cast(a.dims())); })
      .def_property_readonly("dtype", &flash_python::DeviceArray::dtype)
      .def("__dlpack__", &flash_python::DeviceArray::dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", &flash_python::DeviceArray::dlpack_device);
#else
  m.attr("cuda_built") = false;
  m.def(
      "gpu_available", [] { return false; }, "a CUDA GPU can be used (never: this build has no CUDA)");
#endif
}
