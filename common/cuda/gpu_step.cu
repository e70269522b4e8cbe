/// \file gpu_step.cu
/// \brief The session of a GPU step: upload once, launch, time with CUDA events, download once.
#include "common/cuda/gpu_step.cuh"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "common/cuda/device_buffer.cuh"
#include "common/cuda/device_problem.cuh"
#include "common/host_timing.hpp"

namespace common::cuda {

bool nvidia_driver_present() {
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) handle = dlopen("libcuda.so.1", RTLD_LAZY);
  if (!handle) return false;
  dlclose(handle);
  return true;
}

void allow_shared_memory(const void* kernel, size_t bytes) {
  const HostPhase timed("shared-memory attribute");
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, size_t> allowed;  // (kernel, device) -> bytes raised to
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  size_t& raised = allowed[{kernel, device}];
  if (raised >= bytes) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  raised = bytes;
}

namespace {

/// One problem on the GPU: Q, K, V uploaded and O, L poisoned when it opens;
/// each run is one launch; the result is downloaded when asked for.
class GpuSession final : public Session {
 public:
  GpuSession(const std::string& name, std::shared_ptr<const GpuKernel> kernel, const std::vector<int64_t>& head_dims,
             const Problem& problem, Precision precision)
      : kernel_(std::move(kernel)), shape_(problem.shape) {
    validate(problem);
    require_head_dim(problem.shape.head_dim, head_dims, name);
    require_gpu(name);
    require_compute_capability(kernel_->compute_capability, name);
    const int64_t workspace = kernel_->workspace_bytes ? kernel_->workspace_bytes(shape_, problem.causal) : 0;
    dev_ = std::make_unique<DeviceProblem>(problem, workspace, name, precision);
    if (workspace > 0) workspace_ = DeviceBuffer<char>(size_t(workspace), DeviceBuffer<char>::Counted::yes);
    args_.shape = shape_;
    args_.causal = problem.causal;
    args_.scale = problem.scale;
    args_.precision = precision;
    args_.q = dev_->q.data();
    args_.k = dev_->k.data();
    args_.v = dev_->v.data();
    args_.o = dev_->o.data();
    args_.lse = dev_->lse.data();
    args_.workspace = workspace > 0 ? workspace_.data() : nullptr;
    timer_.emplace();  // CUDA events exist only once the GPU is known to be there
  }

  void run() override {
    kernel_->launch(args_);
    CUDA_CHECK(cudaDeviceSynchronize());  // a fault inside the kernel surfaces here
  }

  double timed_run_ms() override {
    timer_->start();
    kernel_->launch(args_);
    return timer_->stop_ms();
  }

  Result result() override {
    Result r = allocate_result(shape_);
    dev_->download(r);
    r.peak_bytes = int64_t(workspace_.bytes());
    if (kernel_->resources) r.extra = kernel_->resources(shape_.head_dim);
    return r;
  }

  bool kernel_only() const override { return true; }

 private:
  std::shared_ptr<const GpuKernel> kernel_;
  Shape shape_;
  std::unique_ptr<DeviceProblem> dev_;
  DeviceBuffer<char> workspace_;
  DeviceArgs args_;
  std::optional<EventTimer> timer_;
};

/// One backward problem on the GPU: Q, K, V, O, L and dO uploaded in the step's
/// precision and dQ, dK, dV poisoned when it opens; each run is the step's
/// backward launch; the gradients are downloaded when asked for.
class GpuBackwardSession final : public BackwardSession {
 public:
  GpuBackwardSession(const std::string& name, std::shared_ptr<const GpuKernel> kernel,
                     const std::vector<int64_t>& head_dims, const Problem& problem, const BackwardInputs& in,
                     const Options& options)
      : kernel_(std::move(kernel)), shape_(problem.shape), precision_(options.precision) {
    validate(problem, in);
    require_head_dim(problem.shape.head_dim, head_dims, name);
    require_gpu(name);
    require_compute_capability(kernel_->compute_capability, name);
    require_dq_order(name, *kernel_, options.deterministic);
    const Shape& s = shape_;
    const int64_t workspace =
        kernel_->backward_workspace_bytes ? kernel_->backward_workspace_bytes(s, options.deterministic) : 0;
    const int64_t e = int64_t(element_bytes(precision_));
    // Q, K, V, O, dO, dQ, dK, dV in the step's precision, L in fp32, and the workspace.
    require_device_memory(e * (4 * s.q_elements() + 4 * s.kv_elements()) + 4 * s.lse_elements() + workspace, name);
    if (precision_ != Precision::fp32) (void)rounded_inputs(problem, precision_);  // refuses what does not fit
    q_ = upload_as(problem.q, precision_);
    k_ = upload_as(problem.k, precision_);
    v_ = upload_as(problem.v, precision_);
    o_ = upload_as(in.o, precision_);
    d_o_ = upload_as(rounded_tensor(in.d_o, precision_, s, s.seq_q, "dO"), precision_);
    lse_ = DeviceBuffer<float>(in.lse);
    dq_ = DeviceBuffer<unsigned char>(size_t(s.q_elements()) * size_t(e));
    dk_ = DeviceBuffer<unsigned char>(size_t(s.kv_elements()) * size_t(e));
    dv_ = DeviceBuffer<unsigned char>(size_t(s.kv_elements()) * size_t(e));
    dq_.poison();
    dk_.poison();
    dv_.poison();
    if (workspace > 0) workspace_ = DeviceBuffer<char>(size_t(workspace), DeviceBuffer<char>::Counted::yes);
    args_.shape = s;
    args_.causal = problem.causal;
    args_.scale = problem.scale;
    args_.precision = precision_;
    args_.q = q_.data();
    args_.k = k_.data();
    args_.v = v_.data();
    args_.o = o_.data();
    args_.lse = lse_.data();
    args_.d_o = d_o_.data();
    args_.dq = dq_.data();
    args_.dk = dk_.data();
    args_.dv = dv_.data();
    args_.workspace = workspace > 0 ? workspace_.data() : nullptr;
    args_.deterministic = options.deterministic;
    timer_.emplace();
  }

  void run() override {
    kernel_->launch_backward(args_);
    CUDA_CHECK(cudaDeviceSynchronize());  // a fault inside a kernel surfaces here
  }

  double timed_run_ms() override {
    timer_->start();
    kernel_->launch_backward(args_);
    return timer_->stop_ms();
  }

  Gradients gradients() override {
    Gradients g;
    g.dq = download_as_float(dq_, precision_);
    g.dk = download_as_float(dk_, precision_);
    g.dv = download_as_float(dv_, precision_);
    g.peak_bytes = int64_t(workspace_.bytes());
    if (kernel_->backward_resources) g.extra = kernel_->backward_resources(shape_.head_dim);
    return g;
  }

  bool kernel_only() const override { return true; }

 private:
  std::shared_ptr<const GpuKernel> kernel_;
  Shape shape_;
  Precision precision_;
  DeviceBuffer<unsigned char> q_, k_, v_, o_, d_o_, dq_, dk_, dv_;
  DeviceBuffer<float> lse_;
  DeviceBuffer<char> workspace_;
  DeviceBackwardArgs args_;
  std::optional<EventTimer> timer_;
};

}  // namespace

StepInfo gpu_step(std::string name, std::string title, std::vector<int64_t> head_dims, GpuKernel kernel,
                  std::vector<Precision> precisions) {
  StepInfo info;
  info.precisions = std::move(precisions);
  info.name = std::move(name);
  info.title = std::move(title);
  info.head_dims = std::move(head_dims);
  info.needs_gpu = true;
  info.gpu = std::make_shared<const GpuKernel>(std::move(kernel));
  info.open = [info](const Problem& p, const Options& o) {
    require_precision(info, o.precision);
    return std::unique_ptr<Session>(std::make_unique<GpuSession>(info.name, info.gpu, info.head_dims, p, o.precision));
  };
  info.forward = [open = info.open](const Problem& p, const Options& o) {
    const std::unique_ptr<Session> session = open(p, o);
    session->run();
    return session->result();
  };
  if (info.gpu->launch_backward) {
    info.has_deterministic_option = info.gpu->deterministic_dq;
    info.open_backward = [info](const Problem& p, const BackwardInputs& in, const Options& o) {
      require_precision(info, o.precision);
      return std::unique_ptr<BackwardSession>(
          std::make_unique<GpuBackwardSession>(info.name, info.gpu, info.head_dims, p, in, o));
    };
    info.backward = [open = info.open_backward](const Problem& p, const BackwardInputs& in, const Options& o) {
      const std::unique_ptr<BackwardSession> session = open(p, in, o);
      session->run();
      return session->gradients();
    };
  }
  return info;
}

}  // namespace common::cuda
