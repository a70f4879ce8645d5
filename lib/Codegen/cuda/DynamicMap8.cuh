// The nearest code (ties to the lower one), by binary search.
__device__ __forceinline__ unsigned int kiln_dynamic_map8_encode(float x) {
  int low = 0, high = 256; // first entry >= x
  while (low < high) {
    const int mid = (low + high) / 2;
    if (kiln_dynamic_map8[mid] < x) low = mid + 1; else high = mid;
  }
  if (low == 0) return 0u;
  if (low == 256) return 255u;
  return x - kiln_dynamic_map8[low - 1] <= kiln_dynamic_map8[low] - x ? low - 1 : low;
}
