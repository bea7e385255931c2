/**
 * GPU names as Xinference reports them, normalised to the GPU types of our instance types.
 *
 * Xinference reports each GPU's raw NVML name, unmodified (`xinference/device_utils.py`, which
 * calls `nvmlDeviceGetName`): "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "Tesla T4",
 * "NVIDIA A10G". A name is matched by its model number as a whole word, most specific first (so
 * "A10" is not "A100", "L4" is not "L40S"); the memory of the GPU (reported beside the name) then
 * picks between instance types of one GPU type, such as A100 40 GB and 80 GB.
 */
const GPU_TYPES: ReadonlyArray<readonly [pattern: RegExp, gpuType: string]> = [
  [/\bH200\b/i, 'H200'],
  [/\bH100\b/i, 'H100'],
  [/\bGH200\b/i, 'GH200'],
  [/\bB200\b/i, 'B200'],
  [/\bA100\b/i, 'A100'],
  [/\bA10G\b/i, 'A10G'],
  [/\bA10\b/i, 'A10'],
  [/\bL40S\b/i, 'L40S'],
  [/\bL40\b/i, 'L40'],
  [/\bL4\b/i, 'L4'],
  [/\bT4\b/i, 'T4'],
  [/\bV100\b/i, 'V100'],
  [/\bA6000\b/i, 'A6000'],
  [/\bMI300X\b/i, 'MI300X'],
];

/** The GPU type of an NVML name ("NVIDIA A100-SXM4-80GB" → "A100"), or undefined when unknown. */
export function gpuTypeOf(nvmlName: string): string | undefined {
  return GPU_TYPES.find(([pattern]) => pattern.test(nvmlName))?.[1];
}
