/// \file host_arrays.cpp
/// \brief NumPy arrays in and out of the steps.
#include "host_arrays.hpp"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

namespace flash_python {

std::string type_name(py::handle object) {
  const py::handle type = py::type::of(object);
  const std::string module = py::str(type.attr("__module__"));
  const std::string name = py::str(type.attr("__qualname__"));
  return module == "builtins" ? name : module + "." + name;
}

namespace {

/// "str '0.5'": the type and a short repr of `value`, for a one-line message.
std::string describe_value(py::handle value) {
  constexpr size_t kMaxRepr = 40;
  std::string text = py::repr(value);
  for (char& c : text) c = (c == '\n' ? ' ' : c);
  if (text.size() > kMaxRepr) text = text.substr(0, kMaxRepr - 3) + "...";
  return type_name(value) + " " + text;
}

bool is_numpy_instance(py::handle value, const char* numpy_type) {
  return py::isinstance(value, py::module_::import("numpy").attr(numpy_type));
}

bool is_bool(py::handle value) { return PyBool_Check(value.ptr()) || is_numpy_instance(value, "bool_"); }

bool is_int(py::handle value) {
  return (PyLong_Check(value.ptr()) && !PyBool_Check(value.ptr())) || is_numpy_instance(value, "integer");
}

}  // namespace

float scale_or_default(std::optional<double> scale, int64_t head_dim) {
  if (!scale) return common::default_scale(head_dim);
  if (!std::isfinite(*scale) || std::abs(*scale) > std::numeric_limits<float>::max()) {
    std::ostringstream got;
    got << std::setprecision(3) << *scale;  // 1e+300, not 301 digits
    throw common::InputError("scale must be a finite number within float32's range, |scale| <= 3.4e+38 (got " +
                             got.str() + ")");
  }
  return static_cast<float>(*scale);
}

bool causal_arg(py::handle value) { return bool_arg(value, "causal"); }

bool bool_arg(py::handle value, const char* name) {
  if (!is_bool(value)) throw py::type_error(std::string(name) + " must be True or False; got " + describe_value(value));
  return value.cast<bool>();
}

std::optional<double> scale_arg(py::handle value) {
  if (value.is_none()) return std::nullopt;
  if (is_bool(value) || !(PyFloat_Check(value.ptr()) || is_int(value) || is_numpy_instance(value, "floating"))) {
    throw py::type_error("scale must be a number (a float) or None for 1/sqrt(d); got " + describe_value(value));
  }
  const double scale = PyFloat_AsDouble(value.ptr());
  if (scale == -1.0 && PyErr_Occurred()) {  // an int beyond float64: OverflowError
    PyErr_Clear();
    return std::numeric_limits<double>::infinity();
  }
  return scale;
}

int64_t sram_floats_arg(py::handle value) {
  constexpr int64_t kMaxSramFloats = int64_t{1} << 30;  // the programs' limit for --sram-floats
  if (!is_int(value)) {
    throw py::type_error("sram_floats must be an int (0: the step's default); got " + describe_value(value));
  }
  const std::string text = py::str(value);
  int overflow = 0;
  const long long m =
      PyLong_AsLongLongAndOverflow(py::int_(py::reinterpret_borrow<py::object>(value)).ptr(), &overflow);
  if (overflow || m < 0 || m > kMaxSramFloats) {
    throw common::InputError("sram_floats needs an integer in [1, " + std::to_string(kMaxSramFloats) +
                             "] (0: the step's default), got " +
                             (text.size() > 20 ? "an int of " + std::to_string(text.size()) + " digits" : text));
  }
  return m;
}

std::optional<std::string> dtype_arg(py::handle value) {
  if (value.is_none()) return std::nullopt;
  if (!PyUnicode_Check(value.ptr())) {
    throw py::type_error("dtype must be 'fp32', 'bf16', 'fp16' or None (the step's own); got " + describe_value(value));
  }
  return value.cast<std::string>();
}

std::vector<int64_t> dims_of(const py::array& array) {
  return std::vector<int64_t>(array.shape(), array.shape() + array.ndim());
}

py::array float32_array(py::handle object, const std::string& name) {
  if (!py::isinstance<py::array>(object)) {
    throw py::type_error(name + " must be a numpy.ndarray of float32, shaped [B, H, N, d]; got " + type_name(object));
  }
  // Any strides: array_t's check compares the dtype only (equivalent to float32).
  if (!py::array_t<float, py::array::forcecast>::check_(object)) {
    throw py::type_error(name + " must be float32; got " + std::string(py::str(object.attr("dtype"))) +
                         " (convert it with .astype(numpy.float32))");
  }
  return py::reinterpret_borrow<py::array>(object);
}

namespace {

// A float32 array's elements in C order: one copy, whatever its strides,
// written straight into the vector (a NumPy copy first would cost the input's
// size twice). A failed allocation is std::bad_alloc: a MemoryError in Python.
std::vector<float> copy_elements(const py::array& array) {
  std::vector<float> data(size_t(array.size()));
  if (data.empty()) return data;
  const char* base = static_cast<const char*>(array.data());
  if (array.flags() & py::array::c_style) {
    std::memcpy(data.data(), base, data.size() * sizeof(float));
    return data;
  }
  // Any number of dimensions: an odometer over the indices, innermost fastest.
  const py::ssize_t ndim = array.ndim();
  std::vector<py::ssize_t> index(size_t(ndim), 0);
  const char* at = base;
  for (float& x : data) {
    std::memcpy(&x, at, sizeof(float));
    for (py::ssize_t axis = ndim - 1; axis >= 0; --axis) {
      at += array.strides(axis);
      if (++index[size_t(axis)] < array.shape(axis)) break;
      at -= array.strides(axis) * array.shape(axis);
      index[size_t(axis)] = 0;
    }
  }
  return data;
}

}  // namespace

common::Problem problem_from_arrays(py::handle q, py::handle k, py::handle v, bool causal, std::optional<double> scale,
                                    const std::function<void(const common::Shape&)>& before_copy) {
  const py::array qa = float32_array(q, "q"), ka = float32_array(k, "k"), va = float32_array(v, "v");
  common::Problem problem;
  problem.shape = common::shape_of(dims_of(qa), dims_of(ka), dims_of(va));  // before anything is copied
  const common::Shape& s = problem.shape;
  problem.causal = causal;
  problem.scale = scale_or_default(scale, s.head_dim);
  if (before_copy) before_copy(s);
  problem.q = copy_elements(qa);
  problem.k = copy_elements(ka);
  problem.v = copy_elements(va);
  common::require_finite(problem.q, s, s.seq_q, "q");
  common::require_finite(problem.k, s, s.seq_kv, "k");
  common::require_finite(problem.v, s, s.seq_kv, "v");
  return problem;
}

std::vector<py::ssize_t> o_dims(const common::Shape& s) { return {s.batch, s.heads, s.seq_q, s.head_dim}; }

std::vector<py::ssize_t> lse_dims(const common::Shape& s) { return {s.batch, s.heads, s.seq_q}; }

namespace {

/// InputError unless `a` has the dimensions `dims`, naming it: "o must have shape [1, 2, 5, 8] for these inputs".
void require_dims(const py::array& a, const std::vector<py::ssize_t>& dims, const std::string& name) {
  if (std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()) != dims) {
    std::string text;
    for (py::ssize_t d : dims) text += (text.empty() ? "" : ", ") + std::to_string(d);
    throw common::InputError(name + " must have shape [" + text + "] for these inputs");
  }
}

}  // namespace

std::vector<py::ssize_t> kv_dims(const common::Shape& s) { return {s.batch, s.heads, s.seq_kv, s.head_dim}; }

common::Result result_from_arrays(py::handle o, py::handle lse, const common::Shape& shape) {
  const py::array oa = float32_array(o, "o"), la = float32_array(lse, "lse");
  require_dims(oa, o_dims(shape), "o");
  require_dims(la, lse_dims(shape), "lse");
  common::Result result;
  result.o = copy_elements(oa);
  result.lse = copy_elements(la);
  return result;
}

std::vector<float> d_o_from_array(py::handle d_o, const common::Shape& shape) {
  const py::array da = float32_array(d_o, "d_o");
  require_dims(da, o_dims(shape), "d_o");
  std::vector<float> data = copy_elements(da);
  common::require_finite(data, shape, shape.seq_q, "d_o");
  return data;
}

common::BackwardInputs backward_inputs_from_arrays(py::handle o, py::handle lse, py::handle d_o,
                                                   const common::Shape& shape) {
  const py::array oa = float32_array(o, "o"), la = float32_array(lse, "lse");
  require_dims(oa, o_dims(shape), "o");  // O's and L's shapes before anything is copied
  require_dims(la, lse_dims(shape), "lse");
  common::BackwardInputs in;
  in.d_o = d_o_from_array(d_o, shape);
  in.o = copy_elements(oa);
  in.lse = copy_elements(la);
  const common::Shape& s = shape;
  common::require_finite(in.o, s, s.seq_q, "o");
  // L is (B, H, N_q): one "column" per row, so its index reads [b, h, n, c=0].
  common::require_finite(in.lse, common::Shape{s.batch, s.heads, s.seq_q, s.seq_kv, 1}, s.seq_q, "lse");
  return in;
}

common::Gradients gradients_from_arrays(py::handle dq, py::handle dk, py::handle dv, const common::Shape& shape) {
  const py::array qa = float32_array(dq, "dq"), ka = float32_array(dk, "dk"), va = float32_array(dv, "dv");
  require_dims(qa, o_dims(shape), "dq");
  require_dims(ka, kv_dims(shape), "dk");
  require_dims(va, kv_dims(shape), "dv");
  common::Gradients g;
  g.dq = copy_elements(qa);
  g.dk = copy_elements(ka);
  g.dv = copy_elements(va);
  return g;
}

}  // namespace flash_python
