/// \file dlpack_tensors.cpp
/// \brief Borrowing CUDA tensors through DLPack and launching a GPU step's kernel on them.
#include "dlpack_tensors.hpp"

#include <cuda_runtime.h>
#include <dlpack/dlpack.h>

#include <atomic>
#include <initializer_list>
#include <utility>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/finite.cuh"
#include "common/host_timing.hpp"
#include "host_arrays.hpp"

namespace flash_python {

namespace {

// Steps 7 and 8 read Q, K, V and write O in float4s (cp.async of 16 bytes in
// step 8): a tensor whose data starts off a 16-byte boundary (a view at an odd
// offset) would fault on the GPU, so it is refused here instead.
constexpr uintptr_t kAlignment = 16;

std::string device_type_name(int type) {
  switch (type) {
    case kDLCPU: return "CPU";
    case kDLCUDAHost: return "pinned host (kDLCUDAHost)";
    case kDLCUDAManaged: return "CUDA managed";
    default: return "DLPack device type " + std::to_string(type);
  }
}

std::string dtype_name(const DLDataType& t) {
  const char* kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string name = t.code < 7 ? kinds[t.code] : "code" + std::to_string(t.code);
  name += std::to_string(t.bits);
  if (t.lanes != 1) name += "x" + std::to_string(t.lanes);
  return name;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

/// The DLPack dtype of a tensor whose elements are of `precision`.
DLDataType dl_dtype(common::Precision precision) {
  switch (precision) {
    case common::Precision::bf16: return {kDLBfloat, 16, 1};
    case common::Precision::fp16: return {kDLFloat, 16, 1};
    case common::Precision::fp32: break;
  }
  return {kDLFloat, 32, 1};
}

bool same_dtype(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/// "float32" or "bfloat16 or float16": the dtypes `step` takes, for messages.
std::string dtypes_text(const common::StepInfo& step, const char* last_separator) {
  const std::vector<std::string> dtypes = step_dtypes(step);
  std::string text;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == dtypes.size() ? last_separator : ", ") + dtypes[i];
  }
  return text;
}

/// A tensor lent through DLPack for the length of one call, consumed as the
/// DLPack protocol asks: the capsule is renamed "used_dltensor" at once (so its
/// producer's destructor no longer frees the tensor, whenever Python collects
/// it) and this object calls the tensor's deleter itself when it is destroyed.
/// So no Python object is held while a check throws: the lifetime of the
/// producer's tensor is this C++ object's, and unwinding touches only C++.
/// Destroy it with the GIL held (a producer's deleter may touch Python objects:
/// CuPy's does).
class Borrowed {
 public:
  Borrowed(py::handle object, std::string name, int64_t stream) : name_(std::move(name)) {
    if (PyCapsule_IsValid(object.ptr(), "dltensor")) {
      // A capsule its framework made for the stream of this launch (flash_steps' PyTorch
      // path: torch.utils.dlpack.to_dlpack of tensors on the current stream): nothing to
      // wait for, and one call fewer into the framework's Python.
      consume(object);
      if (tensor().device.device_type != kDLCUDA) throw not_on_gpu(int(tensor().device.device_type));
      return;
    }
    if (!py::hasattr(object, "__dlpack__") || !py::hasattr(object, "__dlpack_device__")) {
      throw py::type_error(name_ + " must be a CUDA tensor that supports DLPack (PyTorch, CuPy, JAX); got " +
                           type_name(object));
    }
    const py::tuple device = object.attr("__dlpack_device__")();
    const int type = py::int_(device[0]).cast<int>();
    if (type != kDLCUDA) throw not_on_gpu(type);
    // The producer makes `stream` wait for the work that writes this tensor.
    const py::object capsule = object.attr("__dlpack__")(py::arg("stream") = stream);
    if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) {
      throw py::type_error(name_ + ": __dlpack__ returned no DLPack capsule named \"dltensor\"");
    }
    consume(capsule);
  }
  Borrowed(Borrowed&& other) noexcept
      : name_(std::move(other.name_)), managed_(std::exchange(other.managed_, nullptr)) {}
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  Borrowed& operator=(Borrowed&&) = delete;
  ~Borrowed() {
    if (managed_ && managed_->deleter) managed_->deleter(managed_);
  }

  const std::string& name() const { return name_; }
  int device() const { return tensor().device.device_id; }
  const DLDataType& dtype() const { return tensor().dtype; }
  void* data() const { return static_cast<char*>(tensor().data) + tensor().byte_offset; }
  std::vector<int64_t> dims() const { return std::vector<int64_t>(tensor().shape, tensor().shape + tensor().ndim); }
  int64_t bytes() const {
    int64_t elements = 1;
    // From the shape in place, not dims(): require_disjoint asks twice for each pair it compares.
    for (int i = 0; i < tensor().ndim; ++i) elements *= tensor().shape[i];
    return elements * ((tensor().dtype.bits * tensor().dtype.lanes + 7) / 8);
  }

  /// The precision of the elements when `step` computes in it (float32: fp32,
  /// bfloat16: bf16, float16: fp16); otherwise a TypeError naming the dtypes
  /// `step` takes, e.g. "q must be bfloat16 or float16 (step10_tensor_cores
  /// takes bfloat16, float16); got float32".
  common::Precision precision_for(const common::StepInfo& step) const {
    for (common::Precision p : step.precisions) {
      if (same_dtype(dtype(), dl_dtype(p))) return p;
    }
    throw py::type_error(name_ + " must be " + dtypes_text(step, " or ") + " (" + step.name + " takes " +
                         dtypes_text(step, ", ") + "); got " + dtype_name(dtype()));
  }

  /// InputError unless the tensor is row-major and contiguous (a dimension of
  /// size 1 may have any stride) and starts on a 16-byte boundary.
  void require_dense() const {
    const DLTensor& t = tensor();
    if (t.strides) {
      int64_t expected = 1;
      for (int i = t.ndim - 1; i >= 0; --i) {
        if (t.shape[i] != 1 && t.strides[i] != expected) {
          throw common::InputError(name_ +
                                   " is not contiguous; a GPU step takes tensors without a copy, so make "
                                   "one first (PyTorch: .contiguous())");
        }
        expected *= t.shape[i];
      }
    }
    if (reinterpret_cast<uintptr_t>(data()) % kAlignment != 0) {
      throw common::InputError(name_ +
                               "'s data does not start on a 16-byte boundary (a view at an odd offset); "
                               "make a copy first (PyTorch: .clone())");
    }
  }

 private:
  const DLTensor& tensor() const { return managed_->dl_tensor; }

  /// Takes the tensor out of a "dltensor" capsule: renamed "used_dltensor", as the protocol
  /// asks, so that only this object's destructor gives it back.
  void consume(py::handle capsule) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    if (!managed || PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0) throw py::error_already_set();
    managed_ = managed;  // ours from here on: the capsule may go
  }

  common::InputError not_on_gpu(int device_type) const {
    return common::InputError(name_ + " is in " + device_type_name(device_type) +
                              " memory; a GPU step takes CUDA tensors (NumPy arrays go through attention_forward)");
  }

  std::string name_;
  DLManagedTensor* managed_ = nullptr;
};

/// Makes `device` current for the length of a call, then restores the previous one (no
/// driver call at either end when it already is: the common case of one GPU).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// common::cuda::require_gpu, asked of the driver until it has once found a GPU: a GPU
/// does not go away between calls, and a launch from Python should not ask every time.
void require_gpu_once(const std::string& step_name) {
  static std::atomic<bool> found{false};
  if (found.load(std::memory_order_relaxed)) return;
  common::cuda::require_gpu(step_name);
  found.store(true, std::memory_order_relaxed);
}

/// Q, K and V borrowed and checked, the shape they give and the precision of their elements.
struct Inputs {
  Borrowed q, k, v;
  common::Shape shape;
  common::Precision precision = common::Precision::fp32;
};

Inputs borrow_inputs(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, int64_t stream) {
  if (!step.gpu) {
    throw py::type_error(step.name + " runs on the CPU: call attention_forward with NumPy arrays");
  }
  const common::HostPhase timed("borrow and check q, k, v");
  require_gpu_once(step.name);  // first: without a GPU, that is what a user needs to hear
  Inputs in{Borrowed(q, "q", stream), Borrowed(k, "k", stream), Borrowed(v, "v", stream), {}};
  // Q's dtype picks the precision; K and V must have the same (a kernel reads one element type).
  in.precision = in.q.precision_for(step);
  for (const Borrowed* t : {&in.k, &in.v}) {
    if (!same_dtype(t->dtype(), in.q.dtype())) {
      throw py::type_error(t->name() + " is " + dtype_name(t->dtype()) + " but q is " + dtype_name(in.q.dtype()) +
                           "; q, k and v must share one dtype (" + step.name + " takes " + dtypes_text(step, ", ") +
                           ")");
    }
  }
  in.shape = common::shape_of(in.q.dims(), in.k.dims(), in.v.dims());
  common::require_head_dim(in.shape.head_dim, step.head_dims, step.name);
  for (const Borrowed* t : {&in.q, &in.k, &in.v}) {
    if (t->device() != in.q.device()) {
      throw common::InputError(t->name() + " is on cuda:" + std::to_string(t->device()) + " but q is on cuda:" +
                               std::to_string(in.q.device()) + "; all tensors must be on one GPU");
    }
    t->require_dense();
  }
  return in;
}

/// TypeError unless `t` holds elements of `dtype` (O: Q's dtype; L: float32);
/// InputError unless it has `dims`, is dense and on `device`.
void require_output(const Borrowed& t, const std::vector<int64_t>& dims, int device, const DLDataType& dtype,
                    const char* why) {
  if (!same_dtype(t.dtype(), dtype)) {
    throw py::type_error(t.name() + " must be " + dtype_name(dtype) + " (" + why + "); got " + dtype_name(t.dtype()));
  }
  if (t.dims() != dims) {
    throw common::InputError(t.name() + " must have shape " + dims_text(dims) + " for these inputs; got " +
                             dims_text(t.dims()));
  }
  if (t.device() != device) {
    throw common::InputError(t.name() + " must be on q's GPU, cuda:" + std::to_string(device));
  }
  t.require_dense();
}

/// InputError when the bytes of `a` and `b` overlap.
void require_disjoint(const Borrowed& a, const Borrowed& b) {
  const auto* a0 = static_cast<const char*>(a.data());
  const auto* b0 = static_cast<const char*>(b.data());
  if (a0 < b0 + b.bytes() && b0 < a0 + a.bytes()) {
    throw common::InputError(a.name() + " shares memory with " + b.name() +
                             "; the outputs must be separate from the inputs and from each other");
  }
}

std::vector<int64_t> to_dims(const std::vector<py::ssize_t>& dims) { return {dims.begin(), dims.end()}; }

/// The workspace a launch needs, `needed` bytes (`what` names the method that
/// tells its size), borrowed and checked: on `device`, dense, large enough and
/// sharing no memory with `others`. Empty when `needed` is 0 (then `workspace`
/// is ignored).
std::optional<Borrowed> borrow_workspace(py::handle workspace, int64_t needed, const char* what, int device,
                                         int64_t dl_stream, std::initializer_list<const Borrowed*> others,
                                         const common::StepInfo& step) {
  std::optional<Borrowed> scratch;
  if (needed <= 0) return scratch;
  if (workspace.is_none()) {
    throw common::InputError(step.name + " needs a workspace of " + std::to_string(needed) + " bytes on the GPU (" +
                             what + ")");
  }
  scratch.emplace(workspace, "workspace", dl_stream);
  if (scratch->bytes() < needed || scratch->device() != device) {
    throw common::InputError("workspace must hold at least " + std::to_string(needed) + " bytes on cuda:" +
                             std::to_string(device) + " (it holds " + std::to_string(scratch->bytes()) + ")");
  }
  scratch->require_dense();
  for (const Borrowed* t : others) require_disjoint(*scratch, *t);
  return scratch;
}

}  // namespace

int64_t dlpack_stream(std::optional<int64_t> stream) {
  if (stream && *stream < 0) {
    throw common::InputError("stream must be a CUDA stream handle, an integer >= 0 (got " + std::to_string(*stream) +
                             ")");
  }
  return !stream || *stream == 0 ? 1 : *stream;
}

common::Shape check_inputs(const common::StepInfo& step, py::handle q, py::handle k, py::handle v,
                           std::optional<int64_t> stream) {
  return borrow_inputs(step, q, k, v, dlpack_stream(stream)).shape;
}

std::string dtype_of(py::handle tensor, std::optional<int64_t> stream) {
  const Borrowed t(tensor, "tensor", dlpack_stream(stream));
  return dtype_name(t.dtype());
}

int device_of(py::handle q) {
  const py::tuple device = q.attr("__dlpack_device__")();
  return py::int_(device[1]).cast<int>();
}

void launch(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, py::handle o, py::handle lse,
            py::handle workspace, bool causal, std::optional<double> scale, std::optional<int64_t> stream,
            bool check_finite) {
  const int64_t dl_stream = dlpack_stream(stream);
  const Inputs in = borrow_inputs(step, q, k, v, dl_stream);
  const common::Shape& shape = in.shape;
  const DeviceGuard guard(in.q.device());
  common::HostPhase timed("borrow and check o, lse, workspace");
  const Borrowed out_o(o, "o", dl_stream), out_lse(lse, "lse", dl_stream);
  require_output(out_o, to_dims(o_dims(shape)), in.q.device(), in.q.dtype(), "O has the inputs' dtype");
  require_output(out_lse, to_dims(lse_dims(shape)), in.q.device(), dl_dtype(common::Precision::fp32),
                 "L is fp32 in every precision");
  for (const Borrowed* out : {&out_o, &out_lse}) {
    for (const Borrowed* input : {&in.q, &in.k, &in.v}) require_disjoint(*out, *input);
  }
  require_disjoint(out_o, out_lse);

  common::DeviceArgs args;
  args.shape = shape;
  args.causal = causal;
  args.scale = scale_or_default(scale, shape.head_dim);
  args.precision = in.precision;
  args.q = in.q.data();
  args.k = in.k.data();
  args.v = in.v.data();
  args.o = out_o.data();
  args.lse = static_cast<float*>(out_lse.data());
  args.stream = reinterpret_cast<void*>(static_cast<intptr_t>(dl_stream));  // 1 = cudaStreamLegacy

  const int64_t needed = step.gpu->workspace_bytes ? step.gpu->workspace_bytes(shape, causal) : 0;
  const std::optional<Borrowed> scratch = borrow_workspace(workspace, needed, "Step.workspace_bytes", in.q.device(),
                                                           dl_stream, {&in.q, &in.k, &in.v, &out_o, &out_lse}, step);
  if (scratch) args.workspace = scratch->data();
  timed.stop();

  if (check_finite) {
    const common::HostPhase scan("check_finite: scan q, k, v and wait");
    common::cuda::require_finite_inputs(args);
  }
  py::gil_scoped_release release;  // the launch only enqueues; other Python threads may run
  const common::HostPhase launching("step launch (tensor maps, attribute, <<<>>>)");
  step.gpu->launch(args);
}

void launch_backward(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, py::handle o,
                     py::handle lse, py::handle d_o, py::handle dq, py::handle dk, py::handle dv, py::handle workspace,
                     bool causal, std::optional<double> scale, bool deterministic, std::optional<int64_t> stream) {
  const int64_t dl_stream = dlpack_stream(stream);
  const Inputs in = borrow_inputs(step, q, k, v, dl_stream);
  if (!step.gpu->launch_backward) throw common::InputError(step.name + " has no backward pass");
  common::require_dq_order(step.name, *step.gpu, deterministic);
  const common::Shape& shape = in.shape;
  const int device = in.q.device();
  const DeviceGuard guard(device);
  const std::vector<int64_t> q_dims = to_dims(o_dims(shape)), kv = to_dims(kv_dims(shape));
  const DLDataType fp32 = dl_dtype(common::Precision::fp32);
  // The forward's O and L and the upstream dO: read, like Q, K and V.
  const Borrowed in_o(o, "o", dl_stream), in_lse(lse, "lse", dl_stream), in_d_o(d_o, "d_o", dl_stream);
  require_output(in_o, q_dims, device, in.q.dtype(), "O has the inputs' dtype");
  require_output(in_lse, to_dims(lse_dims(shape)), device, fp32, "L is fp32 in every precision");
  require_output(in_d_o, q_dims, device, in.q.dtype(), "dO has the inputs' dtype");
  // dQ, dK, dV: written.
  const Borrowed out_dq(dq, "dq", dl_stream), out_dk(dk, "dk", dl_stream), out_dv(dv, "dv", dl_stream);
  require_output(out_dq, q_dims, device, in.q.dtype(), "dQ has the inputs' dtype");
  require_output(out_dk, kv, device, in.q.dtype(), "dK has the inputs' dtype");
  require_output(out_dv, kv, device, in.q.dtype(), "dV has the inputs' dtype");
  const std::initializer_list<const Borrowed*> outputs{&out_dq, &out_dk, &out_dv};
  for (const Borrowed* out : outputs) {
    for (const Borrowed* input : {&in.q, &in.k, &in.v, &in_o, &in_lse, &in_d_o}) require_disjoint(*out, *input);
  }
  require_disjoint(out_dq, out_dk);
  require_disjoint(out_dq, out_dv);
  require_disjoint(out_dk, out_dv);

  common::DeviceBackwardArgs args;
  args.shape = shape;
  args.causal = causal;
  args.scale = scale_or_default(scale, shape.head_dim);
  args.precision = in.precision;
  args.q = in.q.data();
  args.k = in.k.data();
  args.v = in.v.data();
  args.o = in_o.data();
  args.lse = static_cast<const float*>(in_lse.data());
  args.d_o = in_d_o.data();
  args.dq = out_dq.data();
  args.dk = out_dk.data();
  args.dv = out_dv.data();
  args.deterministic = deterministic;
  args.stream = reinterpret_cast<void*>(static_cast<intptr_t>(dl_stream));  // 1 = cudaStreamLegacy

  const int64_t needed =
      step.gpu->backward_workspace_bytes ? step.gpu->backward_workspace_bytes(shape, deterministic) : 0;
  const std::optional<Borrowed> scratch =
      borrow_workspace(workspace, needed, "Step.backward_workspace_bytes", device, dl_stream,
                       {&in.q, &in.k, &in.v, &in_o, &in_lse, &in_d_o, &out_dq, &out_dk, &out_dv}, step);
  if (scratch) args.workspace = scratch->data();

  py::gil_scoped_release release;  // the launch only enqueues; other Python threads may run
  step.gpu->launch_backward(args);
}

bool gpu_available() {
  int count = 0;
  const bool found = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  return found;
}

DeviceArray::DeviceArray(std::vector<int64_t> dims, int device, const std::string& dtype)
    : dims_(std::move(dims)), device_(device) {
  if (dtype == "float32") {
    precision_ = common::Precision::fp32;
  } else if (dtype == "bfloat16") {
    precision_ = common::Precision::bf16;
  } else if (dtype == "float16") {
    precision_ = common::Precision::fp16;
  } else {
    throw py::type_error("a DeviceArray holds float32, bfloat16 or float16; got dtype '" + dtype + "'");
  }
  common::cuda::require_gpu("flash_steps");
  const DeviceGuard guard(device);
  int64_t elements = 1;
  for (int64_t d : dims_) elements *= d;
  const DLDataType t = dl_dtype(precision_);
  void* memory = nullptr;
  CUDA_CHECK(cudaMalloc(&memory, size_t(elements) * (t.bits / 8)));
  memory_ = std::shared_ptr<void>(memory, [](void* p) { (void)cudaFree(p); });
}

py::capsule DeviceArray::dlpack(py::object /*stream*/, py::object /*max_version*/, py::object dl_device,
                                py::object copy) const {
  if (!copy.is_none() && copy.cast<bool>()) throw py::buffer_error("a DeviceArray is lent, never copied");
  if (!dl_device.is_none() && !dl_device.equal(dlpack_device())) {
    throw py::buffer_error("a DeviceArray stays on its device");
  }
  // What the consumer holds: the DLManagedTensor, its own reference to the
  // memory and its own copy of the dimensions; freed by the deleter.
  struct Lent {
    DLManagedTensor managed{};
    std::shared_ptr<void> memory;
    std::vector<int64_t> dims;
  };
  auto* lent = new Lent{{}, memory_, dims_};
  lent->managed.dl_tensor.data = memory_.get();
  lent->managed.dl_tensor.device = {kDLCUDA, device_};
  lent->managed.dl_tensor.ndim = int(lent->dims.size());
  lent->managed.dl_tensor.dtype = dl_dtype(precision_);
  lent->managed.dl_tensor.shape = lent->dims.data();
  lent->managed.dl_tensor.strides = nullptr;  // row-major, contiguous
  lent->managed.manager_ctx = lent;
  lent->managed.deleter = [](DLManagedTensor* self) { delete static_cast<Lent*>(self->manager_ctx); };
  // A capsule nobody consumed (still named "dltensor") gives the tensor back itself.
  return py::capsule(&lent->managed, "dltensor", [](PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, "dltensor")) {
      auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
      managed->deleter(managed);
    }
  });
}

py::tuple DeviceArray::dlpack_device() const { return py::make_tuple(int(kDLCUDA), device_); }

std::string DeviceArray::dtype() const { return dtype_name(dl_dtype(precision_)); }

void synchronize(std::optional<int64_t> stream) {
  CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(dlpack_stream(stream)))));
}

}  // namespace flash_python
