/** A launch combination of a catalog model, as the serving engine names it. */
export interface ModelSpec {
  modelFormat: string;
  modelSizeInBillions: number;
  quantizations: string[];
  modelEngine: string;
}

export interface LaunchRequest {
  modelFormat?: string;
  modelSizeInBillions?: number | string;
  quantization?: string;
}

export interface ResolvedLaunch {
  modelFormat: string;
  modelSizeInBillions: number;
  quantization: string;
  modelEngine: string;
}

export type Resolution = { ok: true; launch: ResolvedLaunch } | { ok: false; reason: string };

/** `7`, `7.0`, `"7"` and `"0.5"` are sizes; anything else is not. */
export function parseSize(size: number | string | undefined): number | undefined | null {
  if (size === undefined) return undefined;
  const value = typeof size === 'number' ? size : /^\d+(\.\d+)?$/.test(size.trim()) ? Number(size) : Number.NaN;
  return Number.isFinite(value) && value > 0 ? value : null;
}

/**
 * The launch combination a request names, filling what it leaves out: the `pytorch` format when
 * offered (else the first), the smallest size of that format, and the format's first quantization.
 */
export function resolveLaunch(specs: readonly ModelSpec[], request: LaunchRequest): Resolution {
  if (specs.length === 0) return { ok: false, reason: 'it has no launch combinations' };
  const size = parseSize(request.modelSizeInBillions);
  if (size === null) return { ok: false, reason: `model_size_in_billions "${request.modelSizeInBillions}" is not a positive number` };

  const formats = [...new Set(specs.map((spec) => spec.modelFormat))];
  const format = request.modelFormat ?? (formats.includes('pytorch') ? 'pytorch' : (formats[0] ?? ''));
  const ofFormat = specs.filter((spec) => spec.modelFormat === format);
  if (ofFormat.length === 0) return { ok: false, reason: `model_format "${format}" is not offered; choose one of ${formats.join(', ')}` };

  const sizes = ofFormat.map((spec) => spec.modelSizeInBillions).sort((a, b) => a - b);
  const spec = size === undefined ? ofFormat.find((s) => s.modelSizeInBillions === sizes[0]) : ofFormat.find((s) => s.modelSizeInBillions === size);
  if (!spec) return { ok: false, reason: `size ${size}B is not offered in ${format}; choose one of ${sizes.join(', ')}` };

  const quantization = request.quantization ?? spec.quantizations[0];
  if (!quantization || !spec.quantizations.includes(quantization)) {
    return { ok: false, reason: `quantization "${quantization}" is not offered for ${format} ${spec.modelSizeInBillions}B; choose one of ${spec.quantizations.join(', ')}` };
  }
  return { ok: true, launch: { modelFormat: format, modelSizeInBillions: spec.modelSizeInBillions, quantization, modelEngine: spec.modelEngine } };
}
