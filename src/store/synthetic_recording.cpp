#include "store/synthetic_recording.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "store/recording_writer.h"
#include "store/sqlite_db.h"

namespace stackscope {

namespace {

constexpr const char* kHost = "gpu-node-0";
constexpr int64_t kStream = 0x55d0c8a3e000, kCopyStream = 0x55d0c8a3f200, kComm = 0x55d0c9b10400;

// Torch operators as the torch layer names them (at::_ops::<op>::call), with the operators each calls (nested
// one level deeper each); the last one launches the kernels.
struct OpFamily {
  const char* top;
  std::vector<const char*> chain;
};

const std::vector<OpFamily> kForward{
    {"aten::conv2d", {"aten::convolution", "aten::_convolution", "aten::cudnn_convolution"}},
    {"aten::batch_norm", {"aten::_batch_norm_impl_index", "aten::cudnn_batch_norm"}},
    {"aten::relu_", {}},
    {"aten::linear", {"aten::addmm"}},
    {"aten::add_.Tensor", {}},
    {"aten::layer_norm", {"aten::native_layer_norm"}},
    {"aten::gelu", {}},
    {"aten::dropout", {"aten::native_dropout"}},
    {"aten::matmul", {"aten::bmm"}},
    {"aten::softmax.int", {"aten::_softmax"}},
    {"aten::reshape", {"aten::_reshape_alias"}},
    {"aten::transpose.int", {"aten::as_strided"}},
    {"aten::max_pool2d", {"aten::max_pool2d_with_indices"}},
    {"aten::adaptive_avg_pool2d", {"aten::mean.dim"}},
    {"aten::cross_entropy_loss", {"aten::log_softmax.int", "aten::_log_softmax"}},
    {"aten::to.dtype", {"aten::_to_copy", "aten::copy_"}},
    {"aten::mul.Tensor", {}},
    {"aten::scaled_dot_product_attention", {"aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_forward"}},
    {"aten::embedding", {"aten::index_select"}},
    {"aten::cat", {}},
};
const std::vector<OpFamily> kBackward{
    {"aten::convolution_backward", {}},
    {"aten::cudnn_batch_norm_backward", {}},
    {"aten::threshold_backward", {}},
    {"aten::mm", {}},
    {"aten::sum.dim_IntList", {}},
    {"aten::native_layer_norm_backward", {}},
    {"aten::gelu_backward", {}},
    {"aten::native_dropout_backward", {"aten::mul.Tensor"}},
    {"aten::bmm", {}},
    {"aten::_softmax_backward_data", {}},
    {"aten::max_pool2d_with_indices_backward", {}},
    {"aten::add.Tensor", {}},
    {"aten::_log_softmax_backward_data", {}},
    {"aten::nll_loss_backward", {}},
    {"aten::_flash_attention_backward", {}},
    {"aten::embedding_dense_backward", {"aten::index_put_", "aten::_index_put_impl_"}},
    {"aten::t", {"aten::transpose.int", "aten::as_strided"}},
    {"aten::copy_", {}},
    {"aten::div.Scalar", {}},
    {"aten::fill_.Scalar", {}},
};
const std::vector<OpFamily> kOptimizer{
    {"aten::_foreach_mul_.Scalar", {}},       {"aten::_foreach_add_.List", {}},
    {"aten::_foreach_addcmul_.Scalar", {}},   {"aten::_foreach_addcdiv_.ScalarList", {}},
    {"aten::_foreach_sqrt", {}},              {"aten::_foreach_div_.ScalarList", {}},
    {"aten::_foreach_lerp_.Scalar", {}},      {"aten::_foreach_zero_", {}},
    {"aten::_fused_adam_", {}},               {"aten::_foreach_norm.Scalar", {"aten::linalg_vector_norm"}},
};

// Python functions the stack sampler names (leaf qualname, file, first line) by what the thread is doing.
struct PyFunction {
  const char* qualname;
  const char* file;
  int line;
};
const std::vector<PyFunction> kPyForward{
    {"Conv2d._conv_forward", "torch/nn/modules/conv.py", 453},    {"BatchNorm2d.forward", "torch/nn/modules/batchnorm.py", 138},
    {"ReLU.forward", "torch/nn/modules/activation.py", 100},      {"Linear.forward", "torch/nn/modules/linear.py", 115},
    {"Bottleneck.forward", "model.py", 143},                      {"Sequential.forward", "torch/nn/modules/container.py", 215},
    {"ResNet._forward_impl", "model.py", 266},                    {"Module._call_impl", "torch/nn/modules/module.py", 1527},
    {"Module._wrapped_call_impl", "torch/nn/modules/module.py", 1518},
    {"DistributedDataParallel.forward", "torch/nn/parallel/distributed.py", 1506},
    {"DistributedDataParallel._run_ddp_forward", "torch/nn/parallel/distributed.py", 1329},
    {"DistributedDataParallel._pre_forward", "torch/nn/parallel/distributed.py", 1407},
    {"MultiheadAttention.forward", "torch/nn/modules/activation.py", 1160},
    {"LayerNorm.forward", "torch/nn/modules/normalization.py", 195}, {"GELU.forward", "torch/nn/modules/activation.py", 681},
    {"Dropout.forward", "torch/nn/modules/dropout.py", 58},       {"dropout", "torch/nn/functional.py", 1252},
    {"batch_norm", "torch/nn/functional.py", 2450},               {"layer_norm", "torch/nn/functional.py", 2546},
    {"cross_entropy", "torch/nn/functional.py", 3029},            {"Block.forward", "model.py", 88},
    {"Attention.forward", "model.py", 51},                        {"MLP.forward", "model.py", 71},
    {"autocast.__enter__", "torch/amp/autocast_mode.py", 334},    {"autocast.__exit__", "torch/amp/autocast_mode.py", 385},
    {"Tensor.to", "train.py", 61},                                {"_apply_rotary", "model.py", 33},
};
const std::vector<PyFunction> kPyOptimizer{
    {"Adam.step", "torch/optim/adam.py", 135},                   {"_multi_tensor_adam", "torch/optim/adam.py", 439},
    {"_use_grad", "torch/optim/optimizer.py", 71},               {"Optimizer.zero_grad", "torch/optim/optimizer.py", 786},
    {"_group_tensors_by_device_and_dtype", "torch/optim/optimizer.py", 409},
    {"clip_grad_norm_", "torch/nn/utils/clip_grad.py", 20},      {"LRScheduler.step", "torch/optim/lr_scheduler.py", 140},
    {"_get_value", "torch/optim/optimizer.py", 90},
};
const std::vector<PyFunction> kPyLoader{
    {"ImageFolder.__getitem__", "torchvision/datasets/folder.py", 231}, {"pil_loader", "torchvision/datasets/folder.py", 260},
    {"Image.open", "PIL/Image.py", 3229},                        {"ImageFile.load", "PIL/ImageFile.py", 155},
    {"Image.convert", "PIL/Image.py", 867},                      {"RandomResizedCrop.forward", "torchvision/transforms/transforms.py", 960},
    {"RandomResizedCrop.get_params", "torchvision/transforms/transforms.py", 918},
    {"resized_crop", "torchvision/transforms/functional.py", 596}, {"resize", "torchvision/transforms/functional.py", 418},
    {"ToTensor.__call__", "torchvision/transforms/transforms.py", 129}, {"to_tensor", "torchvision/transforms/functional.py", 128},
    {"Normalize.forward", "torchvision/transforms/transforms.py", 270}, {"normalize", "torchvision/transforms/functional.py", 325},
    {"RandomHorizontalFlip.forward", "torchvision/transforms/transforms.py", 695},
    {"default_collate", "torch/utils/data/_utils/collate.py", 230}, {"collate", "torch/utils/data/_utils/collate.py", 110},
    {"collate_tensor_fn", "torch/utils/data/_utils/collate.py", 156},
    {"_MapDatasetFetcher.fetch", "torch/utils/data/_utils/fetch.py", 46},
    {"ForkingPickler.dumps", "multiprocessing/reduction.py", 49}, {"reduce_storage", "torch/multiprocessing/reductions.py", 447},
};
const PyFunction kPyTrainStep{"train_step", "train.py", 74};
const PyFunction kPyBackward{"_engine_run_backward", "torch/autograd/graph.py", 744};
const PyFunction kPyNext{"_MultiProcessingDataLoaderIter._next_data", "torch/utils/data/dataloader.py", 1296};
const PyFunction kPyWorkerWait{"Queue.get", "multiprocessing/queues.py", 98};
const PyFunction kPySave{"_save", "torch/serialization.py", 816};

const char* const kMainStack = "<module>;main;train;train_step";
const char* const kLoaderStack = "<module>;_main;_bootstrap;run;_worker_loop";

std::vector<std::string> make_kernel_names(size_t n) {
  static const char* const kTemplates[] = {
      "void at::native::vectorized_elementwise_kernel<4, at::native::{}Functor<c10::BFloat16>, "
      "at::detail::Array<char*, {}> >(int, at::native::{}Functor<c10::BFloat16>, at::detail::Array<char*, {}>)",
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_{}_n_tilesize{}x{}x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
      "cublas",
      "void cudnn::bn_fw_tr_1C11_kernel_NHWC<__nv_bfloat16, float, {}, true, {}, {}>(cudnnTensorStruct, "
      "__nv_bfloat16 const*, cudnnTensorStruct, __nv_bfloat16*, float const*, float const*, float, float, float*)",
      "void at::native::(anonymous namespace)::{}_kernel<c10::BFloat16, float, {}>(int, int, {}, float*)",
      "sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize{}x{}x{}_stage4_warpsize2x2x1_g1_"
      "tensor16x8x16_kernel",
      "void at::native::reduce_kernel<{}, {}, at::native::ReduceOp<c10::BFloat16, at::native::{}Ops<float, float>, "
      "unsigned int, c10::BFloat16, 4> >(at::native::ReduceOp<c10::BFloat16, at::native::{}Ops<float, float>, "
      "unsigned int, c10::BFloat16, 4>)",
      "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
      "TensorListMetadata<{}>, at::native::(anonymous namespace)::{}Functor<float, {}>, float>(...)",
      "flash_fwd_kernel<Flash_fwd_kernel_traits<{}, {}, {}, 4, false, false, cutlass::bfloat16_t>, false, true>",
  };
  static const char* const kWords[] = {"Add", "Mul", "Gelu", "Relu", "Sigmoid", "Div", "Sum", "Mean", "Norm", "Adam",
                                       "Copy", "Fill", "Where", "Exp", "Sqrt", "Tanh", "Max", "Softmax", "Lerp", "Neg"};
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    const size_t t = i % std::size(kTemplates), k = i / std::size(kTemplates);
    const std::string w = kWords[k % std::size(kWords)];
    const int a = 64 << (k % 3), b = 2 + static_cast<int>(k / std::size(kWords));
    out.push_back(fmt::format(fmt::runtime(kTemplates[t]), t % 2 ? std::to_string(a) : w, b, w, b));
  }
  return out;
}

struct Op {
  uint32_t name = 0;  // into names_
  int64_t depth = 0;
  std::vector<Op> children;
  std::vector<uint32_t> kernels;  // launched by this op itself
  double self_us = 5;
};

class SyntheticJob {
 public:
  SyntheticJob(RecordingWriter& w, const SyntheticGpuJobOptions& o)
      : w_(w), o_(o), rng_(o.seed), kernel_names_(make_kernel_names(std::max<size_t>(o.kernel_names, 1))) {
    const double ops = o.torch_ops_per_s * o.step_s, launches = o.launches_per_s * o.step_s;
    forward_ = plan(kForward, ops * 0.4);
    backward_ = plan(kBackward, ops * 0.5);
    optimizer_ = plan(kOptimizer, ops * 0.1);
    assign_kernels(launches);
    declare_series();
  }

  SyntheticGpuJobSummary run() {
    const int64_t end = o_.first_ns + static_cast<int64_t>(o_.seconds * 1e9);
    const int64_t slice = 250'000'000;  // the recorder's event flush interval: same block sizes
    int64_t step_t = o_.first_ns, next_tick = o_.first_ns;
    std::vector<int64_t> worker_t(o_.loader_workers, o_.first_ns);
    int64_t slice_end = o_.first_ns + slice, sample_flush = o_.first_ns + 1'000'000'000;
    while (slice_end <= end + slice) {
      const int64_t horizon = std::min(slice_end, end);
      while (step_t < horizon) step_t = step(step_t, end);
      for (size_t i = 0; i < worker_t.size(); ++i)
        while (worker_t[i] < horizon) worker_t[i] = loader_cycle(i, worker_t[i], end);
      for (; next_tick < horizon; next_tick += static_cast<int64_t>(o_.sample_period_s * 1e9)) tick(next_tick);
      // Events reach the recorder when they end: append those finished by the slice's end, in that order.
      auto done = std::partition(pending_.begin(), pending_.end(),
                                 [&](const Event& e) { return e.start_ns + e.duration_ns < slice_end; });
      std::sort(pending_.begin(), done, [](const Event& a, const Event& b) {
        return a.start_ns + a.duration_ns < b.start_ns + b.duration_ns;
      });
      for (auto it = pending_.begin(); it != done; ++it) {
        summary_.first_ns = summary_.events ? std::min(summary_.first_ns, it->start_ns) : it->start_ns;
        summary_.last_ns = std::max(summary_.last_ns, it->start_ns + it->duration_ns);
        ++summary_.events;
        w_.append_event(std::move(*it));
      }
      pending_.erase(pending_.begin(), done);
      if (slice_end >= sample_flush || slice_end > end) {  // samples in blocks of about 1 s, as recorded
        summary_.samples += samples_.size();
        w_.append_samples(samples_);
        samples_.clear();
        sample_flush += 1'000'000'000;
      }
      w_.flush();
      slice_end += slice;
    }
    summary_.series = series_count_;
    return summary_;
  }

 private:
  double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  double lognormal_us(double median_us, double sigma) {
    return median_us * std::exp(sigma * std::normal_distribution<double>(0, 1)(rng_));
  }
  static int64_t ns(double us) { return std::max<int64_t>(1, static_cast<int64_t>(us * 1e3)); }

  uint32_t name_id(const std::string& n) {
    auto it = std::find(names_.begin(), names_.end(), n);
    if (it != names_.end()) return static_cast<uint32_t>(it - names_.begin());
    names_.push_back(n);
    return static_cast<uint32_t>(names_.size() - 1);
  }

  std::vector<Op> plan(const std::vector<OpFamily>& families, double target_events) {
    std::vector<Op> ops;
    double n = 0;
    while (n < target_events) {
      const OpFamily& f = families[pick(families.size())];
      Op top{name_id(f.top), 0, {}, {}, lognormal_us(6, 0.4)};
      Op* leaf = &top;
      for (size_t d = 0; d < f.chain.size(); ++d) {
        leaf->children.push_back({name_id(f.chain[d]), static_cast<int64_t>(d + 1), {}, {}, lognormal_us(3, 0.4)});
        leaf = &leaf->children.back();
      }
      n += 1.0 + static_cast<double>(f.chain.size());
      ops.push_back(std::move(top));
    }
    return ops;
  }

  static Op& leaf_of(Op& op) { return op.children.empty() ? op : leaf_of(op.children.back()); }

  // Every leaf launches at least one kernel; the rest are spread at random until a step launches `launches`.
  void assign_kernels(double launches) {
    std::vector<Op*> leaves;
    for (auto* plan : {&forward_, &backward_, &optimizer_})
      for (Op& op : *plan) leaves.push_back(&leaf_of(op));
    const auto target = static_cast<size_t>(std::max(launches, static_cast<double>(leaves.size())));
    for (size_t i = 0; i < target; ++i) {
      Op* leaf = i < leaves.size() ? leaves[i] : leaves[pick(leaves.size())];
      leaf->kernels.push_back(static_cast<uint32_t>(pick(kernel_names_.size())));
    }
  }

  void declare_series() {
    auto add = [&](SeriesInfo s) {
      s.host = kHost;
      ++series_count_;
      return w_.add_series(s);
    };
    static const char* const kCpuFields[] = {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"};
    for (size_t c = 0; c < o_.cpus; ++c)
      for (const char* f : kCpuFields)
        cpu_series_.push_back(add(series_info(std::string("cpu.time.") + f, fmt::format("cpu{}", c), Subsystem::cpu,
                                              "jiffies", SeriesKind::counter, SeriesCategory::dynamic)));
    // 54 others: memory gauges, vm and network and disk counters, load and pressure.
    for (const char* m : {"mem.MemFree", "mem.MemAvailable", "mem.Buffers", "mem.Cached", "mem.Active", "mem.Inactive",
                          "mem.Dirty", "mem.Writeback", "mem.AnonPages", "mem.Mapped", "mem.Shmem", "mem.Slab",
                          "mem.PageTables", "mem.Committed_AS"})
      gauges_.push_back(add(series_info(m, "", Subsystem::memory, "bytes", SeriesKind::gauge, SeriesCategory::dynamic)));
    for (const char* m : {"vm.pgfault", "vm.pgmajfault", "vm.pgpgin", "vm.pgpgout", "vm.pswpin", "vm.pswpout",
                          "vm.pgsteal_kswapd", "vm.pgscan_direct", "vm.nr_dirtied", "vm.nr_written"})
      counters_.push_back(add(series_info(m, "", Subsystem::memory, "count", SeriesKind::counter, SeriesCategory::dynamic)));
    for (const char* i : {"eth0", "lo"})
      for (const char* f : {"rx.bytes", "tx.bytes", "rx.packets", "tx.packets", "rx.errs", "tx.drop"})
        counters_.push_back(add(series_info(std::string("net.") + f, i, Subsystem::network,
                                            std::string(f).ends_with("bytes") ? "bytes" : "count", SeriesKind::counter,
                                            SeriesCategory::dynamic)));
    for (const char* f : {"disk.reads", "disk.writes", "disk.read.bytes", "disk.write.bytes", "disk.io.time",
                          "disk.io.weighted_time"})
      counters_.push_back(add(series_info(f, "nvme0n1", Subsystem::storage, "count", SeriesKind::counter,
                                          SeriesCategory::dynamic)));
    for (const char* f : {"ctxt", "intr", "processes", "softirq.NET_RX", "softirq.TIMER", "softirq.SCHED"})
      counters_.push_back(add(series_info(f, "", Subsystem::cpu, "count", SeriesKind::counter, SeriesCategory::dynamic)));
    for (const char* f : {"load.1", "load.5", "load.15", "procs_running", "psi.cpu.some.avg10", "psi.memory.some.avg10"})
      gauges_.push_back(add(series_info(f, "", Subsystem::cpu, "count", SeriesKind::gauge, SeriesCategory::dynamic)));
    auto nvml = [&](const char* name, const std::string& dev, const char* unit, SeriesKind kind) {
      return add(series_info(name, dev, Subsystem::gpu, unit,
                             kind, kind == SeriesKind::counter ? SeriesCategory::event_counter : SeriesCategory::dynamic,
                             "nvml"));
    };
    for (const char* g : {"gpu.util", "gpu.mem.util", "gpu.mem.used", "gpu.power", "gpu.temp", "gpu.clock.sm",
                          "gpu.clock.mem", "gpu.pcie.tx", "gpu.pcie.rx", "gpu.throttle.reasons", "gpu.throttle.power",
                          "gpu.throttle.thermal", "gpu.throttle.hw_slowdown"})
      gpu_gauges_.push_back(nvml(g, "gpu0", "ratio", SeriesKind::gauge));
    gpu_energy_ = nvml("gpu.energy", "gpu0", "joules", SeriesKind::counter);
    gpu_total_ = nvml("gpu.mem.total", "gpu0", "bytes", SeriesKind::static_value);
    const std::string me = fmt::format("gpu0/pid{}", o_.pid), other = fmt::format("gpu0/pid{}", o_.pid + 5000);
    for (const std::string& dev : {me, other}) {
      proc_series_.push_back(nvml("gpu.proc.sm_util", dev, "ratio", SeriesKind::gauge));
      proc_series_.push_back(nvml("gpu.proc.mem_util", dev, "ratio", SeriesKind::gauge));
      proc_series_.push_back(nvml("gpu.proc.mem.used", dev, "bytes", SeriesKind::gauge));
    }
  }

  // How much longer steps take at t (the slowdown episode), and whether the loader stalls.
  double slowdown(int64_t t) const {
    const double s = static_cast<double>(t - o_.first_ns) * 1e-9;
    return s >= 0.3 * o_.seconds && s < 0.3 * o_.seconds + std::min(20.0, 0.05 * o_.seconds) ? 1.6 : 1.0;
  }
  bool loader_stall(int64_t t) const {
    const double s = static_cast<double>(t - o_.first_ns) * 1e-9;
    return s >= 0.6 * o_.seconds && s < 0.6 * o_.seconds + std::min(30.0, 0.05 * o_.seconds);
  }
  bool checkpoint_at(int64_t t, int64_t step_len) const {
    const int64_t rel = t - o_.first_ns, period = 600'000'000'000;
    return rel > 0 && rel / period != (rel - step_len) / period;
  }

  Event event(Layer layer, uint8_t flags, uint32_t tid, int64_t start, int64_t dur, std::string name) const {
    Event e;
    e.layer = layer;
    e.flags = flags;
    e.pid = o_.pid;
    e.tid = tid;
    e.start_ns = start;
    e.duration_ns = dur;
    e.name = std::move(name);
    return e;
  }

  void launch(uint32_t tid, uint32_t kernel, int64_t& c) {
    double us = lognormal_us(4.5, 0.3);
    if (uniform() < 0.002) us *= 20;  // the allocator or a lock in the launch path
    Event e = event(Layer::cuda, kEventHostEnqueue, tid, c, ns(us), "cudaLaunchKernel");
    const int64_t k = kernel;
    e.args = {{"grid_x", 1 + (k * 37) % 1024}, {"grid_y", 1 + k % 3},     {"grid_z", 1},
              {"block_x", 128 << (k % 3)},     {"block_y", 1},            {"block_z", 1},
              {"shared_mem", (k % 4) * 16384}, {"stream", kStream},       {"ret", int64_t{0}},
              {"kernel", kernel_names_[kernel]}, {"depth", int64_t{0}}};
    pending_.push_back(std::move(e));
    c += ns(us) + ns(lognormal_us(1.0, 0.3));
  }

  void cuda_call(const char* name, uint32_t tid, int64_t& c, double us, bool enqueue, std::vector<EventArg> args) {
    Event e = event(Layer::cuda, enqueue ? kEventHostEnqueue : kEventNone, tid, c, ns(us), name);
    e.args = std::move(args);
    e.args.push_back({"ret", int64_t{0}});
    e.args.push_back({"depth", int64_t{0}});
    pending_.push_back(std::move(e));
    c += ns(us) + ns(lognormal_us(1.0, 0.3));
  }

  void run_op(const Op& op, uint32_t tid, int64_t& c) {
    const int64_t start = c;
    c += ns(lognormal_us(op.self_us * 0.5, 0.3));
    for (const Op& child : op.children) run_op(child, tid, c);
    for (uint32_t k : op.kernels) launch(tid, k, c);
    c += ns(lognormal_us(op.self_us * 0.5, 0.3));
    Event e = event(Layer::torch, kEventNone, tid, start, c - start, names_[op.name]);
    e.args = {{"depth", op.depth}};
    pending_.push_back(std::move(e));
  }

  void py_sample(uint32_t pid, uint32_t tid, int64_t t, int64_t dur, const PyFunction& f, const char* prefix,
                 bool offcpu) {
    Event e = event(Layer::python, kEventNone, tid, t, dur, std::string(f.qualname) + (offcpu ? " (off-cpu)" : ""));
    e.pid = pid;
    std::string stack = std::string(prefix) + ";" + f.qualname;
    const auto frames = static_cast<int64_t>(std::count(stack.begin(), stack.end(), ';') + 1);
    e.args = {{"file", std::string("/usr/lib/python3/dist-packages/") + f.file},
              {"line", int64_t{f.line}},
              {"stack", std::move(stack)},
              {"frames", frames},
              {"sample", std::string(offcpu ? "off-cpu" : "cpu")}};
    pending_.push_back(std::move(e));
  }

  // On-CPU samples of the main thread over [from, to), each named after one of `pool`.
  void sample_main(int64_t from, int64_t to, const std::vector<PyFunction>& pool, const char* prefix) {
    const auto period = static_cast<int64_t>(1e9 / o_.python_sample_hz);
    int64_t& t = main_sample_t_;
    t = std::max(t, from);
    for (; t < to; t += period) py_sample(o_.pid, o_.pid, t, period, pool[pick(pool.size())], prefix, false);
  }

  int64_t step(int64_t t, int64_t end) {
    const uint32_t main = o_.pid, autograd = o_.pid + 1;
    const double slow = slowdown(t);
    int64_t c = t;
    if (loader_stall(t)) {  // the main thread waits for the next batch
      const int64_t wait = ns(lognormal_us(60'000, 0.3));
      py_sample(o_.pid, main, c, wait, kPyNext, kMainStack, true);
      c += wait;
    }
    const int64_t step_len = static_cast<int64_t>(o_.step_s * 1e9 * slow * (1 + 0.05 * (uniform() - 0.5)));
    if (checkpoint_at(t, step_len)) {  // torch.save: the GPU idles for seconds
      const int64_t save = ns(4e6);
      cuda_call("cudaDeviceSynchronize", main, c, 300, false, {});
      sample_main(c, c + save, {kPySave}, kMainStack);
      c += save;
    }
    const int64_t fwd_start = c;
    cuda_call("cudaMemcpyAsync", main, c, lognormal_us(12, 0.3), true,
              {{"dst", int64_t{0x7f2000000000}}, {"src", int64_t{0x7f9000000000}}, {"bytes", int64_t{12'845'056}},
               {"direction", std::string("HtoD")}, {"stream", kCopyStream}});
    cuda_call("cudaMemcpyAsync", main, c, lognormal_us(8, 0.3), true,
              {{"dst", int64_t{0x7f2001000000}}, {"src", int64_t{0x7f9001000000}}, {"bytes", int64_t{1024}},
               {"direction", std::string("HtoD")}, {"stream", kCopyStream}});
    cuda_call("cudaStreamWaitEvent", main, c, lognormal_us(2, 0.3), true,
              {{"stream", kStream}, {"event", int64_t{0x55d0cc000100}}});
    for (size_t i = 0; i < forward_.size(); ++i) {
      run_op(forward_[i], main, c);
      if (i % 16 == 0)
        cuda_call("cudaMemsetAsync", main, c, lognormal_us(3, 0.3), true,
                  {{"ptr", int64_t{0x7f2100000000}}, {"value", int64_t{0}}, {"bytes", int64_t{4096}},
                   {"stream", kStream}});
    }
    sample_main(fwd_start, c, kPyForward, kMainStack);
    // Backward on the autograd thread, gradient buckets all-reduced as they fill; the main thread waits for it.
    int64_t b = c + ns(20);
    const int64_t bwd_start = b;
    const size_t buckets = 8;
    for (size_t i = 0; i < backward_.size(); ++i) {
      run_op(backward_[i], autograd, b);
      if ((i + 1) % std::max<size_t>(1, backward_.size() / buckets) == 0) {
        const double us = lognormal_us(25, 0.3);
        const int64_t count = i + 1 >= backward_.size() ? 3'211'264 : 12'582'912;
        Event e = event(Layer::nccl, kEventHostEnqueue, autograd, b, ns(us), "ncclAllReduce");
        e.args = {{"count", count},       {"datatype", std::string("bfloat16")}, {"op", std::string("sum")},
                  {"comm", kComm},        {"stream", kCopyStream + 0x400},       {"bytes", count * 2},
                  {"ret", int64_t{0}},    {"rank", int64_t{0}},                  {"nranks", int64_t{8}},
                  {"depth", int64_t{0}}};
        pending_.push_back(std::move(e));
        b += ns(us) + ns(2);
      }
    }
    py_sample(o_.pid, main, c, b - bwd_start + ns(30), kPyBackward, kMainStack, true);
    main_sample_t_ = std::max(main_sample_t_, b + ns(30));
    c = b + ns(30);
    const int64_t opt_start = c;
    for (const Op& op : optimizer_) run_op(op, main, c);
    if (++steps_ % 200 == 0) {  // the caching allocator grows now and then
      cuda_call("cudaMalloc", main, c, lognormal_us(400, 0.5), false,
                {{"ptr", int64_t{0x7f3000000000}}, {"bytes", int64_t{268'435'456}}});
      cuda_call("cudaFree", main, c, lognormal_us(150, 0.5), false, {{"ptr", int64_t{0x7f3000000000}}});
    }
    sample_main(opt_start, c, kPyOptimizer, kMainStack);
    // loss.item(): a device-to-host copy, then the wait for the GPU to finish the step.
    cuda_call("cudaMemcpyAsync", main, c, lognormal_us(9, 0.3), true,
              {{"dst", int64_t{0x7f9002000000}}, {"src", int64_t{0x7f2002000000}}, {"bytes", int64_t{4}},
               {"direction", std::string("DtoH")}, {"stream", kStream}});
    const int64_t step_end = std::max(t + step_len, c + ns(5));
    const int64_t sync_start = c;
    cuda_call("cudaStreamSynchronize", main, c, static_cast<double>(step_end - sync_start) * 1e-3, false,
              {{"stream", kStream}});
    sample_main(sync_start, c, {kPyTrainStep}, kMainStack);
    gpu_busy_ += static_cast<double>(step_end - fwd_start);
    (void)end;
    return std::max(c, step_end);
  }

  // A data-loader worker: decodes and augments a batch on the CPU, then waits for the next request.
  int64_t loader_cycle(size_t worker, int64_t t, int64_t) {
    const uint32_t pid = o_.pid + 100 + static_cast<uint32_t>(worker);
    const auto period = static_cast<int64_t>(1e9 / o_.python_sample_hz);
    const int64_t busy = ns(lognormal_us(loader_stall(t) ? 150'000 : 40'000, 0.25));
    for (int64_t s = t; s < t + busy; s += period) py_sample(pid, pid, s, period, kPyLoader[pick(kPyLoader.size())], kLoaderStack, false);
    const int64_t wait = ns(lognormal_us(loader_stall(t) ? 2'000 : 60'000, 0.4));
    py_sample(pid, pid, t + busy, wait, kPyWorkerWait, kLoaderStack, true);
    return t + busy + wait;
  }

  void tick(int64_t t) {
    const double util = std::min(1.0, 0.92 / slowdown(t)) * (loader_stall(t) ? 0.5 : 1.0);
    const double dt = o_.sample_period_s;
    auto put = [&](SeriesId id, double v) { samples_.push_back({id, t, v}); };
    cpu_acc_.resize(cpu_series_.size());
    for (size_t i = 0; i < cpu_series_.size(); ++i) {
      // jiffies at 100 Hz: busy CPUs are the job's main, autograd and loader threads.
      const size_t cpu = i / 8, field = i % 8;
      const bool busy = cpu < 2 + o_.loader_workers;
      const double share[8] = {busy ? 0.8 : 0.02, 0, busy ? 0.12 : 0.01, busy ? 0.06 : 0.97, 0.002, 0.001, 0.004, 0};
      cpu_acc_[i] += std::round(share[field] * 100 * dt + (uniform() - 0.5) * (field == 3 || field == 0 ? 2 : 0.6));
      cpu_acc_[i] = std::max(cpu_acc_[i], 0.0);
      put(cpu_series_[i], std::floor(cpu_acc_[i]));
    }
    counter_acc_.resize(counters_.size());
    for (size_t i = 0; i < counters_.size(); ++i) {
      counter_acc_[i] += std::floor(uniform() * static_cast<double>(1 + (i * 7919) % 5000) * dt * 10);
      put(counters_[i], counter_acc_[i]);
    }
    for (size_t i = 0; i < gauges_.size(); ++i)
      put(gauges_[i], i < 14 ? std::floor(1e9 * static_cast<double>(1 + i) * (1 + 0.01 * uniform()))
                             : std::round(100 * (4 + uniform())) / 100);
    const double gpu[] = {util,  util * 0.6, 6.2e10 + 1e8 * uniform(), 450 + 200 * util * uniform(), 61 + 3 * uniform(),
                          1.98e9, 2.6e9, 2.1e8 * uniform(), 1.4e9 * util * uniform(), 0, 0, 0, 0};
    for (size_t i = 0; i < gpu_gauges_.size(); ++i) put(gpu_gauges_[i], gpu[i]);
    energy_ += 500 * dt;
    put(gpu_energy_, energy_);
    put(gpu_total_, 8.1e10);
    for (size_t i = 0; i < 3; ++i) put(proc_series_[i], i == 0 ? util : i == 1 ? util * 0.6 : 6.0e10);
    if (slowdown(t) > 1)  // another process computes on the same GPU during the slowdown
      for (size_t i = 3; i < 6; ++i) put(proc_series_[i], i == 3 ? 0.35 : i == 4 ? 0.2 : 8.0e9);
  }

  RecordingWriter& w_;
  SyntheticGpuJobOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::string> kernel_names_, names_;
  std::vector<Op> forward_, backward_, optimizer_;
  std::vector<Event> pending_;
  std::vector<Sample> samples_;
  std::vector<SeriesId> cpu_series_, counters_, gauges_, gpu_gauges_, proc_series_;
  SeriesId gpu_energy_ = 0, gpu_total_ = 0;
  std::vector<double> cpu_acc_, counter_acc_;
  double energy_ = 0, gpu_busy_ = 0;
  int64_t main_sample_t_ = 0;
  uint64_t steps_ = 0;
  size_t series_count_ = 0;
  SyntheticGpuJobSummary summary_;
};

}  // namespace

SyntheticGpuJobSummary write_synthetic_gpu_job(const std::string& path, const SyntheticGpuJobOptions& options) {
  if (!(options.seconds > 0) || !(options.step_s > 0) || !(options.sample_period_s > 0) ||
      !(options.python_sample_hz > 0))
    throw std::invalid_argument("synthetic job: seconds, step, sample period and python rate must be > 0");
  SyntheticGpuJobSummary summary;
  {
    RecordingWriter w(path);
    w.set_meta("host", kHost);
    w.set_meta("command", "python3 train.py (synthetic: stackscope synthetic_recording, seed " +
                              std::to_string(options.seed) + ")");
    w.set_meta("pid", std::to_string(options.pid));
    w.set_meta("cpu_count", std::to_string(options.cpus));
    w.set_meta("gpu_models", "NVIDIA H100 80GB HBM3 (synthetic)");
    w.set_meta("synthetic", "1");
    SyntheticJob job(w, options);
    summary = job.run();
    w.close();
    if (w.stats().dropped) throw std::runtime_error(fmt::format("synthetic job: {} events dropped", w.stats().dropped));
  }
  // The recording's own span: what the job covered, not when the generator ran.
  sql::Db db(path, sql::Db::Mode::read_write);
  auto st = db.prepare("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)");
  st.bind(1, std::string_view("start_ns")).bind(2, std::to_string(options.first_ns)).run();
  st.bind(1, std::string_view("end_ns")).bind(2, std::to_string(summary.last_ns)).run();
  return summary;
}

}  // namespace stackscope
