/// \file dlpack_tensors.cpp
/// \brief Borrowing CUDA tensors through DLPack and launching a GPU step's kernel on them.
#include "dlpack_tensors.hpp"

#include <cuda_runtime.h>
#include <dlpack/dlpack.h>

#include <utility>

#include "common/cuda/cuda_check.cuh"
#include "common/cuda/finite.cuh"
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

/// A tensor lent through DLPack for the length of one call. The capsule keeps
/// the producer's tensor alive; when it is released, its destructor hands the
/// tensor back (the capsule is not renamed "used_dltensor": this module never
/// takes ownership, it only reads the pointer during the call).
class Borrowed {
 public:
  Borrowed(py::handle object, std::string name, int64_t stream) : name_(std::move(name)) {
    if (!py::hasattr(object, "__dlpack__") || !py::hasattr(object, "__dlpack_device__")) {
      throw py::type_error(name_ + " must be a CUDA tensor that supports DLPack (PyTorch, CuPy, JAX); got " +
                           type_name(object));
    }
    const py::tuple device = object.attr("__dlpack_device__")();
    const int type = py::int_(device[0]).cast<int>();
    if (type != kDLCUDA) {
      throw common::InputError(name_ + " is in " + device_type_name(type) +
                               " memory; a GPU step takes CUDA tensors (NumPy arrays go through attention_forward)");
    }
    // The producer makes `stream` wait for the work that writes this tensor.
    capsule_ = object.attr("__dlpack__")(py::arg("stream") = stream);
    if (!PyCapsule_IsValid(capsule_.ptr(), "dltensor")) {
      throw py::type_error(name_ + ": __dlpack__ returned no DLPack capsule named \"dltensor\"");
    }
    tensor_ = &static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule_.ptr(), "dltensor"))->dl_tensor;
  }

  const std::string& name() const { return name_; }
  int device() const { return tensor_->device.device_id; }
  void* data() const { return static_cast<char*>(tensor_->data) + tensor_->byte_offset; }
  std::vector<int64_t> dims() const { return std::vector<int64_t>(tensor_->shape, tensor_->shape + tensor_->ndim); }
  int64_t bytes() const {
    int64_t elements = 1;
    for (int64_t d : dims()) elements *= d;
    return elements * ((tensor_->dtype.bits * tensor_->dtype.lanes + 7) / 8);
  }

  /// TypeError unless the elements are float32, the one precision every step
  /// takes today (step_dtypes).
  void require_float32(const common::StepInfo& step) const {
    const DLDataType& t = tensor_->dtype;
    if (t.code != kDLFloat || t.bits != 32 || t.lanes != 1) {
      std::string takes;
      for (const std::string& dtype : step_dtypes(step)) takes += (takes.empty() ? "" : ", ") + dtype;
      throw py::type_error(name_ + " must be float32 (" + step.name + " takes " + takes + "); got " +
                           dtype_name(t));
    }
  }

  /// InputError unless the tensor is row-major and contiguous (a dimension of
  /// size 1 may have any stride) and starts on a 16-byte boundary.
  void require_dense() const {
    if (tensor_->strides) {
      int64_t expected = 1;
      for (int i = tensor_->ndim - 1; i >= 0; --i) {
        if (tensor_->shape[i] != 1 && tensor_->strides[i] != expected) {
          throw common::InputError(name_ + " is not contiguous; a GPU step takes tensors without a copy, so make "
                                   "one first (PyTorch: .contiguous())");
        }
        expected *= tensor_->shape[i];
      }
    }
    if (reinterpret_cast<uintptr_t>(data()) % kAlignment != 0) {
      throw common::InputError(name_ + "'s data does not start on a 16-byte boundary (a view at an odd offset); "
                               "make a copy first (PyTorch: .clone())");
    }
  }

 private:
  std::string name_;
  py::object capsule_;
  DLTensor* tensor_ = nullptr;
};

/// Makes `device` current for the length of a call, then restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

/// Q, K and V borrowed and checked, and the shape they give.
struct Inputs {
  Borrowed q, k, v;
  common::Shape shape;
};

Inputs borrow_inputs(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, int64_t stream) {
  if (!step.gpu) {
    throw py::type_error(step.name + " runs on the CPU: call attention_forward with NumPy arrays");
  }
  common::cuda::require_gpu(step.name);  // first: without a GPU, that is what a user needs to hear
  Inputs in{Borrowed(q, "q", stream), Borrowed(k, "k", stream), Borrowed(v, "v", stream), {}};
  for (const Borrowed* t : {&in.q, &in.k, &in.v}) t->require_float32(step);
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

/// InputError unless `t` has `dims`, is float32, dense and on `device`.
void require_output(const Borrowed& t, const std::vector<int64_t>& dims, int device, const common::StepInfo& step) {
  t.require_float32(step);
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

}  // namespace

int64_t dlpack_stream(std::optional<int64_t> stream) {
  if (stream && *stream < 0) {
    throw common::InputError("stream must be a CUDA stream handle, an integer >= 0 (got " +
                             std::to_string(*stream) + ")");
  }
  return !stream || *stream == 0 ? 1 : *stream;
}

common::Shape check_inputs(const common::StepInfo& step, py::handle q, py::handle k, py::handle v,
                           std::optional<int64_t> stream) {
  return borrow_inputs(step, q, k, v, dlpack_stream(stream)).shape;
}

int device_of(py::handle q) {
  const py::tuple device = q.attr("__dlpack_device__")();
  return py::int_(device[1]).cast<int>();
}

void launch(const common::StepInfo& step, py::handle q, py::handle k, py::handle v, py::handle o,
            py::handle lse, py::handle workspace, bool causal, std::optional<double> scale,
            std::optional<int64_t> stream, bool check_finite) {
  const int64_t dl_stream = dlpack_stream(stream);
  const Inputs in = borrow_inputs(step, q, k, v, dl_stream);
  const common::Shape& shape = in.shape;
  const DeviceGuard guard(in.q.device());
  const Borrowed out_o(o, "o", dl_stream), out_lse(lse, "lse", dl_stream);
  require_output(out_o, to_dims(o_dims(shape)), in.q.device(), step);
  require_output(out_lse, to_dims(lse_dims(shape)), in.q.device(), step);
  for (const Borrowed* out : {&out_o, &out_lse}) {
    for (const Borrowed* input : {&in.q, &in.k, &in.v}) require_disjoint(*out, *input);
  }
  require_disjoint(out_o, out_lse);

  common::DeviceArgs args;
  args.shape = shape;
  args.causal = causal;
  args.scale = scale_or_default(scale, shape.head_dim);
  args.q = in.q.data();
  args.k = in.k.data();
  args.v = in.v.data();
  args.o = out_o.data();
  args.lse = static_cast<float*>(out_lse.data());
  args.stream = reinterpret_cast<void*>(static_cast<intptr_t>(dl_stream));  // 1 = cudaStreamLegacy

  const int64_t needed = step.gpu->workspace_bytes ? step.gpu->workspace_bytes(shape) : 0;
  std::optional<Borrowed> scratch;
  if (needed > 0) {
    if (workspace.is_none()) {
      throw common::InputError(step.name + " needs a workspace of " + std::to_string(needed) +
                               " bytes on the GPU (Step.workspace_bytes)");
    }
    scratch.emplace(workspace, "workspace", dl_stream);
    if (scratch->bytes() < needed || scratch->device() != in.q.device()) {
      throw common::InputError("workspace must hold at least " + std::to_string(needed) + " bytes on cuda:" +
                               std::to_string(in.q.device()) + " (it holds " + std::to_string(scratch->bytes()) +
                               ")");
    }
    scratch->require_dense();
    for (const Borrowed* t : {&in.q, &in.k, &in.v, &out_o, &out_lse}) require_disjoint(*scratch, *t);
    args.workspace = scratch->data();
  }

  if (check_finite) common::cuda::require_finite_inputs(args);
  py::gil_scoped_release release;  // the launch only enqueues; other Python threads may run
  step.gpu->launch(args);
}

bool gpu_available() {
  int count = 0;
  const bool found = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  (void)cudaGetLastError();
  return found;
}

DeviceArray::DeviceArray(std::vector<int64_t> dims, int device) : dims_(std::move(dims)), device_(device) {
  common::cuda::require_gpu("flash_steps");
  const DeviceGuard guard(device);
  int64_t elements = 1;
  for (int64_t d : dims_) elements *= d;
  void* memory = nullptr;
  CUDA_CHECK(cudaMalloc(&memory, size_t(elements) * sizeof(float)));
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
  lent->managed.dl_tensor.dtype = {kDLFloat, 32, 1};
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

void synchronize(std::optional<int64_t> stream) {
  CUDA_CHECK(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(dlpack_stream(stream)))));
}

}  // namespace flash_python
