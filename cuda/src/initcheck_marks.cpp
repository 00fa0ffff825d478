#include "initcheck_marks.hpp"

#include <nvtx3/nvToolsExtMemCudaRt.h>

namespace flashref::cuda {

void mark_initialized_for_initcheck(const void* ptr, std::size_t bytes, cudaStream_t stream) {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("flashref");
  nvtxMemVirtualRangeDesc_t range{};
  range.ptr = ptr;
  range.size = bytes;
  nvtxMemMarkInitializedBatch_t batch{};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof(batch);
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.regionDescCount = 1;
  batch.regionDescElementSize = sizeof(range);
  batch.regionDescElements = &range;
  nvtxMemCudaMarkInitialized(domain, stream, 0, &batch);
}

}  // namespace flashref::cuda
