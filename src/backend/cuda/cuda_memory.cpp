// SPDX-License-Identifier: Apache-2.0
#include "backend/cuda/cuda_memory.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_driver.hpp"
#include "backend/cuda/cuda_error.hpp"
#include "backend/cuda/cuda_memory_pages.hpp"
#include "backend/cuda/cuda_memory_sources.hpp"
#include "tensorpool/core/error.hpp"
#include "tensorpool/core/log.hpp"
#include "tensorpool/core/units.hpp"
#include "tensorpool/memory/out_of_memory_error.hpp"

namespace tp::backend::cuda {
namespace {

void set_device(int ordinal) { check(cudaSetDevice(ordinal), "cudaSetDevice"); }

// For noexcept paths (frees): a failure there cannot be thrown, and ignoring it would hide a broken device;
// one that says the process is exiting (is_shutting_down) is not one (cuda_error.hpp).
void report_failure(cudaError_t status, const char* call) noexcept { report_teardown_failure(status, call); }

std::string free_words(int ordinal) {
  std::size_t free = 0;
  std::size_t total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return "";
  }
  return "; the driver reports " + format_bytes(free) + " free of " + format_bytes(total) +
         " on cuda:" + std::to_string(ordinal);
}

// The other GPUs that can reach device `ordinal`'s memory (cudaDeviceCanAccessPeer): the pool's and the VMM
// pages' memory is made accessible to them too, as plain cudaMalloc memory is once peer access is enabled.
std::vector<int> peers_of(int ordinal) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  std::vector<int> peers;
  for (int other = 0; other < count; ++other) {
    int can_access = 0;
    if (other == ordinal) continue;
    check(cudaDeviceCanAccessPeer(&can_access, other, ordinal), "cudaDeviceCanAccessPeer");
    if (can_access != 0) peers.push_back(other);
  }
  return peers;
}

int device_attribute(cudaDeviceAttr attribute, int ordinal, const char* name) {
  int value = 0;
  check(cudaDeviceGetAttribute(&value, attribute, ordinal), std::string("cudaDeviceGetAttribute(") + name + ")");
  return value;
}

class CudaPageDriver final : public PageDriver {
 public:
  explicit CudaPageDriver(int ordinal)
      : ordinal_(ordinal),
        reserve_(driver_function<decltype(&cuMemAddressReserve)>("cuMemAddressReserve")),
        free_(driver_function<decltype(&cuMemAddressFree)>("cuMemAddressFree")),
        create_(driver_function<decltype(&cuMemCreate)>("cuMemCreate")),
        release_(driver_function<decltype(&cuMemRelease)>("cuMemRelease")),
        map_(driver_function<decltype(&cuMemMap)>("cuMemMap")),
        unmap_(driver_function<decltype(&cuMemUnmap)>("cuMemUnmap")),
        set_access_(driver_function<decltype(&cuMemSetAccess)>("cuMemSetAccess")) {
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = ordinal;
    set_device(ordinal_);
    CUmemAccessDesc own{};
    own.location = prop_.location;
    own.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access_.push_back(own);
    for (const int peer : peers_of(ordinal_)) {
      CUmemAccessDesc shared = own;
      shared.location.id = peer;
      access_.push_back(shared);
    }
    auto granularity = driver_function<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
    std::size_t recommended = 0;
    check(granularity(&recommended, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity(RECOMMENDED)");
    std::size_t minimum = 0;
    check(granularity(&minimum, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity(MINIMUM)");
    granularity_ = std::max(recommended, minimum);
  }

  std::size_t granularity() const noexcept override { return granularity_; }

  std::uintptr_t reserve(std::size_t bytes) override {
    set_device(ordinal_);
    CUdeviceptr base = 0;
    check(reserve_(&base, bytes, granularity_, 0, 0), "cuMemAddressReserve");
    return static_cast<std::uintptr_t>(base);
  }
  void free_reservation(std::uintptr_t base, std::size_t bytes) noexcept override {
    report(free_(static_cast<CUdeviceptr>(base), bytes), "cuMemAddressFree");
  }
  std::optional<std::uint64_t> create() override {
    set_device(ordinal_);
    CUmemGenericAllocationHandle handle = 0;
    const CUresult status = create_(&handle, granularity_, &prop_, 0);
    if (is_out_of_memory(status)) return std::nullopt;
    check(status, "cuMemCreate");
    return static_cast<std::uint64_t>(handle);
  }
  void release(std::uint64_t handle) noexcept override {
    report(release_(static_cast<CUmemGenericAllocationHandle>(handle)), "cuMemRelease");
  }
  bool map(std::uintptr_t address, std::uint64_t handle) override {
    set_device(ordinal_);
    const auto device_address = static_cast<CUdeviceptr>(address);
    const CUresult mapped = map_(device_address, granularity_, 0, static_cast<CUmemGenericAllocationHandle>(handle), 0);
    if (is_out_of_memory(mapped)) return false;
    check(mapped, "cuMemMap");
    const CUresult access = set_access_(device_address, granularity_, access_.data(), access_.size());
    if (access != CUDA_SUCCESS) {
      report(unmap_(device_address, granularity_), "cuMemUnmap");
      if (is_out_of_memory(access)) return false;
      check(access, "cuMemSetAccess");
    }
    return true;
  }
  void unmap(std::uintptr_t address) noexcept override {
    report(unmap_(static_cast<CUdeviceptr>(address), granularity_), "cuMemUnmap");
  }
  void copy_disjoint(void* to, const void* from, std::size_t bytes) noexcept override {
    // A compaction moving live blocks: a copy that fails leaves tensors corrupt, which no caller could undo.
    cudaError_t status = cudaSetDevice(ordinal_);
    if (status == cudaSuccess) status = cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice);
    if (status == cudaSuccess) status = cudaDeviceSynchronize();  // a device-to-device cudaMemcpy may return early
    if (status != cudaSuccess) {  // reported whatever the status: the process stops here
      TP_LOG(error, "cuda", "cudaMemcpy (expandable arena compaction) failed: ", cudaGetErrorName(status), " (",
             static_cast<int>(status), "): ", cudaGetErrorString(status));
      std::abort();
    }
  }
  std::string describe_refusal(const char* call) const override {
    return std::string(call) + " refused a " + format_bytes(granularity_) +
           " page on cuda:" + std::to_string(ordinal_) + " (out of memory)" + free_words(ordinal_);
  }

 private:
  // A free that fails is reported, unless the process is exiting (cuda_error.hpp, is_shutting_down).
  static void report(CUresult status, const char* call) noexcept { report_teardown_failure(status, call); }

  const int ordinal_;
  decltype(&cuMemAddressReserve) reserve_;
  decltype(&cuMemAddressFree) free_;
  decltype(&cuMemCreate) create_;
  decltype(&cuMemRelease) release_;
  decltype(&cuMemMap) map_;
  decltype(&cuMemUnmap) unmap_;
  decltype(&cuMemSetAccess) set_access_;
  CUmemAllocationProp prop_{};
  std::vector<CUmemAccessDesc> access_;  // the device itself first, then its peers
  std::size_t granularity_ = 0;
};

cudaMemLocation device_location(int ordinal) {
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = ordinal;
  return location;
}

}  // namespace

DriverMemoryInfo driver_memory_info(int ordinal) {
  set_device(ordinal);
  DriverMemoryInfo info;
  check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  return info;
}

// --- CudaRegionResource ---------------------------------------------------------------------------------------

CudaRegionResource::CudaRegionResource(Kind kind, int ordinal, std::size_t capacity_bytes, std::string name)
    : MemoryResource(std::move(name)), kind_(kind), ordinal_(ordinal), capacity_(capacity_bytes) {
  if (capacity_bytes == 0) {
    TP_THROW(InvalidArgument, "memory", this->name(), ": capacity_bytes = 0; a device needs memory");
  }
  stats_.bytes_limit = capacity_;
}

void CudaRegionResource::refuse(std::size_t bytes, std::size_t rounded, const memory::AllocationTag& tag,
                                const std::string& detail) {
  OutOfMemoryReport report;
  {
    std::lock_guard lock(mutex_);
    ++stats_.num_ooms;
    report = OutOfMemoryReport::for_request(name(), bytes, rounded, tag, capacity_, stats_.bytes_in_use,
                                            stats_.bytes_reserved);
    report.largest_free_block = capacity_ > stats_.bytes_reserved ? capacity_ - stats_.bytes_reserved : 0;
  }
  report.detail = detail;
  throw OutOfMemoryError(std::move(report));
}

void* CudaRegionResource::do_allocate(std::size_t bytes, std::size_t /*alignment*/, const memory::AllocationTag& tag) {
  const std::size_t rounded = memory::round_up(bytes, kCudaMallocAlignment);
  const char* call = kind_ == Kind::managed ? "cudaMallocManaged" : "cudaMalloc";
  {
    // Taken before the call (pending_), so concurrent requests never cross the wall together; the stats
    // record the allocation only once the driver has served it.
    std::lock_guard lock(mutex_);
    const std::size_t used = stats_.bytes_reserved + pending_;
    if (used > capacity_ || rounded > capacity_ - used) {
      ++stats_.num_ooms;
      auto report = OutOfMemoryReport::for_request(name(), bytes, rounded, tag, capacity_, stats_.bytes_in_use, used);
      report.largest_free_block = capacity_ > used ? capacity_ - used : 0;
      report.detail = name() + ": " + format_bytes(rounded) + " more would exceed the " +
                      (kind_ == Kind::managed ? "managed-memory budget" : "device's share") + " of " +
                      format_bytes(capacity_) + " (" + format_bytes(used) + " allocated)";
      throw OutOfMemoryError(std::move(report));
    }
    pending_ += rounded;
  }
  void* ptr = nullptr;
  cudaError_t status = cudaSetDevice(ordinal_);
  if (status == cudaSuccess) {
    status = kind_ == Kind::managed ? cudaMallocManaged(&ptr, bytes, cudaMemAttachGlobal) : cudaMalloc(&ptr, bytes);
  }
  {
    std::lock_guard lock(mutex_);
    pending_ -= rounded;
    if (status == cudaSuccess) stats_.record_allocation(bytes, rounded, rounded);
  }
  if (status != cudaSuccess) {
    if (is_out_of_memory(status)) {
      static_cast<void>(cudaGetLastError());  // clears the (non-sticky) error so later calls do not see it
      refuse(bytes, rounded, tag,
             std::string(call) + " of " + format_bytes(bytes) + " refused: " + cudaGetErrorName(status) +
                 free_words(ordinal_));
    }
    check(status, call);
  }
  if (kind_ == Kind::managed) {
    // The device's managed memory prefers its GPU: pages the host touched migrate back at the next access or
    // prefetch, and under oversubscription the driver evicts them last. A hint: its failure is logged.
    try {
      advise_preferred_location(ptr, bytes, ordinal_);
    } catch (const DeviceError& error) {
      static_cast<void>(cudaGetLastError());
      TP_LOG(warning, "cuda", name(), ": the preferred location of a managed region was refused: ", error.what());
    }
  }
  std::lock_guard lock(mutex_);
  ++stats_.upstream_allocs;
  return ptr;
}

void CudaRegionResource::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  const std::size_t rounded = memory::round_up(bytes, kCudaMallocAlignment);
  cudaError_t status = cudaSetDevice(ordinal_);
  if (status == cudaSuccess) status = cudaFree(ptr);
  report_failure(status, "cudaFree");
  std::lock_guard lock(mutex_);
  stats_.record_free(bytes, rounded, rounded);
  ++stats_.upstream_frees;
}

memory::MemoryStats CudaRegionResource::do_stats() const {
  std::lock_guard lock(mutex_);
  memory::MemoryStats stats = stats_;
  stats.largest_free_block = capacity_ > stats.bytes_reserved ? capacity_ - stats.bytes_reserved : 0;
  return stats;
}

void CudaRegionResource::do_reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

// --- CudaAsyncPoolResource ------------------------------------------------------------------------------------

CudaAsyncPoolResource::CudaAsyncPoolResource(int ordinal, std::size_t budget_bytes, memory::GrowthPolicy policy,
                                             std::string name)
    : MemoryResource(std::move(name)), ordinal_(ordinal), budget_(budget_bytes) {
  set_device(ordinal_);
  if (device_attribute(cudaDevAttrMemoryPoolsSupported, ordinal_, "cudaDevAttrMemoryPoolsSupported") == 0) {
    TP_THROW(InvalidArgument, "memory", this->name(),
             ": allocator = cuda_malloc_async needs memory pools, which cuda:", ordinal_,
             " does not support (cudaDevAttrMemoryPoolsSupported = 0); use allocator = bfc");
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location = device_location(ordinal_);
  check(cudaMemPoolCreate(&pool_, &props), "cudaMemPoolCreate");
  try {
    std::uint64_t threshold = policy == memory::GrowthPolicy::preallocate ? budget_ : 0;
    check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold),
          "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
    std::vector<cudaMemAccessDesc> peers;
    for (const int peer : peers_of(ordinal_)) {
      cudaMemAccessDesc access{};
      access.location = device_location(peer);
      access.flags = cudaMemAccessFlagsProtReadWrite;
      peers.push_back(access);
    }
    if (!peers.empty()) check(cudaMemPoolSetAccess(pool_, peers.data(), peers.size()), "cudaMemPoolSetAccess");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  } catch (...) {
    report_failure(cudaMemPoolDestroy(pool_), "cudaMemPoolDestroy");
    throw;
  }
}

CudaAsyncPoolResource::~CudaAsyncPoolResource() {
  report_failure(cudaSetDevice(ordinal_), "cudaSetDevice");
  report_failure(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  report_failure(cudaStreamDestroy(stream_), "cudaStreamDestroy");
  report_failure(cudaMemPoolDestroy(pool_), "cudaMemPoolDestroy");
}

CudaAsyncPoolResource::PoolAttributes CudaAsyncPoolResource::attributes() const {
  set_device(ordinal_);
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  PoolAttributes attributes;
  const auto read = [this](cudaMemPoolAttr attribute, std::uint64_t& value, const char* call) {
    cuuint64_t read_value = 0;
    check(cudaMemPoolGetAttribute(pool_, attribute, &read_value), call);
    value = read_value;
  };
  read(cudaMemPoolAttrReservedMemCurrent, attributes.reserved_current, "cudaMemPoolGetAttribute(ReservedMemCurrent)");
  read(cudaMemPoolAttrReservedMemHigh, attributes.reserved_high, "cudaMemPoolGetAttribute(ReservedMemHigh)");
  read(cudaMemPoolAttrUsedMemCurrent, attributes.used_current, "cudaMemPoolGetAttribute(UsedMemCurrent)");
  read(cudaMemPoolAttrUsedMemHigh, attributes.used_high, "cudaMemPoolGetAttribute(UsedMemHigh)");
  read(cudaMemPoolAttrReleaseThreshold, attributes.release_threshold, "cudaMemPoolGetAttribute(ReleaseThreshold)");
  return attributes;
}

void* CudaAsyncPoolResource::do_allocate(std::size_t bytes, std::size_t /*alignment*/,
                                         const memory::AllocationTag& tag) {
  set_device(ordinal_);
  void* ptr = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&ptr, bytes, pool_, stream_);
  if (is_out_of_memory(status)) {
    static_cast<void>(cudaGetLastError());
    ooms_.fetch_add(1, std::memory_order_relaxed);
    const PoolAttributes pool = attributes();
    auto report =
        OutOfMemoryReport::for_request(name(), bytes, bytes, tag, budget_, pool.used_current, pool.reserved_current);
    report.largest_free_block = pool.reserved_current - std::min(pool.reserved_current, pool.used_current);
    report.detail = "cudaMallocFromPoolAsync of " + format_bytes(bytes) + " refused: " + cudaGetErrorName(status) +
                    free_words(ordinal_);
    throw OutOfMemoryError(std::move(report));
  }
  check(status, "cudaMallocFromPoolAsync");
  // Any stream may use the memory once this returns: the allocation must have happened, not just be queued.
  const cudaError_t synchronized = cudaStreamSynchronize(stream_);
  if (synchronized != cudaSuccess) {
    report_failure(cudaFreeAsync(ptr, stream_), "cudaFreeAsync");
    check(synchronized, "cudaStreamSynchronize");
  }
  allocs_.fetch_add(1, std::memory_order_relaxed);
  return ptr;
}

void CudaAsyncPoolResource::do_deallocate(void* ptr, std::size_t /*bytes*/) noexcept {
  // The caller hands memory back only once no stream uses it (see the class comment): freeing it on our own
  // stream needs no event.
  cudaError_t status = cudaSetDevice(ordinal_);
  if (status == cudaSuccess) status = cudaFreeAsync(ptr, stream_);
  report_failure(status, "cudaFreeAsync");
  frees_.fetch_add(1, std::memory_order_relaxed);
}

std::size_t CudaAsyncPoolResource::do_trim() {
  const std::uint64_t before = attributes().reserved_current;
  check(cudaMemPoolTrimTo(pool_, 0), "cudaMemPoolTrimTo");
  const std::uint64_t after = attributes().reserved_current;
  return static_cast<std::size_t>(before > after ? before - after : 0);
}

memory::MemoryStats CudaAsyncPoolResource::do_stats() const {
  const PoolAttributes pool = attributes();
  memory::MemoryStats stats;
  stats.bytes_reserved = pool.reserved_current;
  stats.peak_bytes_reserved = pool.reserved_high;
  stats.bytes_in_use = pool.used_current;
  stats.peak_bytes_in_use = pool.used_high;
  stats.largest_free_block = pool.reserved_current - std::min(pool.reserved_current, pool.used_current);
  stats.upstream_allocs = allocs_.load(std::memory_order_relaxed);
  stats.upstream_frees = frees_.load(std::memory_order_relaxed);
  stats.num_ooms = ooms_.load(std::memory_order_relaxed);
  stats.bytes_limit = budget_;
  return stats;
}

void CudaAsyncPoolResource::do_reset_peak() {
  set_device(ordinal_);
  check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  cuuint64_t zero = 0;  // the only value the high-water attributes take: they restart from the current use
  check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero),
        "cudaMemPoolSetAttribute(ReservedMemHigh)");
  check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute(UsedMemHigh)");
}

// --- CudaPinnedHostResource -----------------------------------------------------------------------------------

CudaPinnedHostResource::CudaPinnedHostResource()
    : MemoryResource("cuda_pinned_host"), page_size_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {}

void* CudaPinnedHostResource::do_allocate(std::size_t bytes, std::size_t /*alignment*/,
                                          const memory::AllocationTag& tag) {
  const std::size_t rounded = memory::round_up(bytes, page_size_);
  void* ptr = nullptr;
  const cudaError_t status = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
  if (status != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    if (!is_out_of_memory(status)) check(status, "cudaHostAlloc");
    OutOfMemoryReport report;
    {
      std::lock_guard lock(mutex_);
      ++stats_.num_ooms;
      report = OutOfMemoryReport::for_request(name(), bytes, rounded, tag, std::nullopt, stats_.bytes_in_use,
                                              stats_.bytes_reserved);
    }
    report.detail = std::string("cudaHostAlloc(cudaHostAllocPortable) refused: ") + cudaGetErrorName(status);
    throw OutOfMemoryError(std::move(report));
  }
  std::lock_guard lock(mutex_);
  stats_.record_allocation(bytes, rounded, rounded);
  ++stats_.upstream_allocs;
  return ptr;
}

void CudaPinnedHostResource::do_deallocate(void* ptr, std::size_t bytes) noexcept {
  const std::size_t rounded = memory::round_up(bytes, page_size_);
  report_failure(cudaFreeHost(ptr), "cudaFreeHost");
  std::lock_guard lock(mutex_);
  stats_.record_free(bytes, rounded, rounded);
  ++stats_.upstream_frees;
}

memory::MemoryStats CudaPinnedHostResource::do_stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CudaPinnedHostResource::do_reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

// --- VMM, hints -----------------------------------------------------------------------------------------------

bool virtual_memory_supported(int ordinal) {
  set_device(ordinal);
  CUdevice device = 0;
  check(driver_function<decltype(&cuDeviceGet)>("cuDeviceGet")(&device, ordinal), "cuDeviceGet");
  int supported = 0;
  check(driver_function<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute")(
            &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device),
        "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
  return supported != 0;
}

std::unique_ptr<PageDriver> make_cuda_page_driver(int ordinal) { return std::make_unique<CudaPageDriver>(ordinal); }

void prefetch(const void* ptr, std::size_t bytes, int ordinal, cudaStream_t stream) {
  set_device(ordinal);
  check(cudaMemPrefetchAsync(ptr, bytes, device_location(ordinal), 0, stream), "cudaMemPrefetchAsync");
}

void advise_read_mostly(const void* ptr, std::size_t bytes, int ordinal) {
  set_device(ordinal);
  check(cudaMemAdvise(ptr, bytes, cudaMemAdviseSetReadMostly, device_location(ordinal)),
        "cudaMemAdvise(cudaMemAdviseSetReadMostly)");
}

void advise_preferred_location(const void* ptr, std::size_t bytes, int ordinal) {
  set_device(ordinal);
  check(cudaMemAdvise(ptr, bytes, cudaMemAdviseSetPreferredLocation, device_location(ordinal)),
        "cudaMemAdvise(cudaMemAdviseSetPreferredLocation)");
}

// --- the stack ------------------------------------------------------------------------------------------------

std::unique_ptr<memory::MemoryStack> make_cuda_memory_stack(const memory::MemoryConfig& config,
                                                            std::size_t capacity_bytes, int ordinal) {
  config.validate();
  if (capacity_bytes == 0) {
    TP_THROW(InvalidArgument, "memory", config.device, ": capacity_bytes = 0; give the device's memory in bytes");
  }
  using memory::AllocatorKind;
  set_device(ordinal);
  switch (config.allocator) {
    case AllocatorKind::bfc:
    case AllocatorKind::system:
      return memory::make_memory_stack(config,
                                       std::make_unique<CudaRegionResource>(CudaRegionResource::Kind::device, ordinal,
                                                                            capacity_bytes, config.device),
                                       nullptr, capacity_bytes);
    case AllocatorKind::expandable: {
      if (!virtual_memory_supported(ordinal)) {
        TP_THROW(InvalidArgument, "memory", config.device,
                 ": allocator = expandable maps pages with CUDA's virtual memory management API, which cuda:", ordinal,
                 " does not support (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0); use allocator ="
                 " bfc or cuda_malloc_async (TP_ALLOCATOR)");
      }
      return memory::make_memory_stack(
          config, nullptr,
          std::make_unique<PagedVirtualMemory>(make_cuda_page_driver(ordinal), config.device, capacity_bytes),
          capacity_bytes);
    }
    case AllocatorKind::cuda_malloc_async: {
      const std::size_t budget = memory::resolve_limit_bytes(config, capacity_bytes);
      return memory::make_memory_stack(
          config, std::make_unique<CudaAsyncPoolResource>(ordinal, budget, config.policy, config.device), nullptr,
          capacity_bytes);
    }
    case AllocatorKind::managed: {
      if (device_attribute(cudaDevAttrManagedMemory, ordinal, "cudaDevAttrManagedMemory") == 0) {
        TP_THROW(InvalidArgument, "memory", config.device,
                 ": allocator = managed needs managed memory, which cuda:", ordinal,
                 " does not support (cudaDevAttrManagedMemory = 0); use allocator = bfc");
      }
      // A managed budget above what the GPU has free can hang the GPU when it is not asked for: only an
      // explicit fraction above 1 may oversubscribe.
      const std::size_t budget = memory::resolve_limit_bytes(config, capacity_bytes);
      const bool oversubscribe = config.fraction.has_value() && *config.fraction > 1.0;
      const DriverMemoryInfo info = driver_memory_info(ordinal);
      if (!oversubscribe && budget > info.free_bytes) {
        TP_THROW(InvalidArgument, "memory", config.device, ": the managed-memory budget of ", format_bytes(budget),
                 " exceeds the ", format_bytes(info.free_bytes), " cuda:", ordinal,
                 " has free; lower limit_bytes or fraction (TP_MEMORY_FRACTION), or oversubscribe explicitly with a"
                 " fraction above 1");
      }
      return memory::make_memory_stack(
          config,
          std::make_unique<CudaRegionResource>(CudaRegionResource::Kind::managed, ordinal, budget, config.device),
          nullptr, capacity_bytes);
    }
  }
  TP_THROW(InvalidArgument, "memory", config.device, ": unknown allocator kind ", static_cast<int>(config.allocator));
}

std::unique_ptr<memory::MemoryResource> make_cuda_pinned_host_resource() {
  return std::make_unique<CudaPinnedHostResource>();
}

}  // namespace tp::backend::cuda
