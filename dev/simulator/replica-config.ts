import { isRecord, valueError } from './http.ts';

/**
 * The `replica_config` of a scale-up (`POST /v1/models/{uid}/replicas`), read as Xinference 3.2
 * reads it: the structure by its pydantic v1 models (`xinference/core/replica_config.py`,
 * `ReplicaConfig`, `DeviceConfig`: unknown fields forbidden), refused as `Invalid replica_config:
 * <pydantic's message>` by the route (`api/restful_api.py`, `add_model_replica`), then the rules
 * the supervisor checks once it found the model (`replica_config.py`, `normalize_replica_configs`,
 * `_validate_device_consistency`). Line numbers: v3.2.0+61, commit 7ecec16b6; the scale-up code
 * is the same in v3.2.0.
 */

export interface DeviceConfig {
  /** The worker's full `host:port`, matched exactly (`core/supervisor.py`, `_get_worker_ref_by_address`). */
  workerIp: string;
  nGpu: number | 'auto';
  /** GPU indexes on that worker; null lets the worker choose. */
  gpuIdx: number[] | null;
}

export interface ReplicaConfig {
  replicaUid: string | null;
  devices: DeviceConfig[];
}

interface FieldError {
  loc: (string | number)[];
  msg: string;
  type: string;
}

/**
 * Reads the body's `replica_config` (absent or null: none). Throws the route's 400s: not an
 * object, a pydantic validation error, or not exactly one device.
 */
export function readReplicaConfig(raw: unknown): ReplicaConfig | null {
  if (raw === undefined || raw === null) return null;
  if (!isRecord(raw)) throw valueError('Invalid replica_config: expected a dict with a single device entry.');
  const errors: FieldError[] = [];
  const config = replicaConfig(raw, errors);
  if (errors.length > 0) throw valueError(`Invalid replica_config: ${pydanticMessage('ReplicaConfig', errors)}`);
  if (config.devices.length !== 1) throw valueError('replica_config must contain exactly one device entry for scale-up.');
  return config;
}

/**
 * The supervisor's checks of a scale-up's config (`normalize_replica_configs` with `replica=1`):
 * the label, `<uid>-<new replica id>` unless given, is neither blank nor a reserved replica or rank
 * name, and `n_gpu` agrees with `gpu_idx`. The label it resolves to.
 */
export function normalizeReplicaConfig(config: ReplicaConfig, defaultLabel: string): string {
  const device = config.devices[0] as DeviceConfig;
  const gpuIdx = device.gpuIdx ?? [];
  if (gpuIdx.length > 0) {
    if (device.nGpu !== 'auto' && device.nGpu !== gpuIdx.length) {
      throw valueError(`replica_config[0].devices[0].n_gpu (${device.nGpu}) must equal len(gpu_idx) (${gpuIdx.length}), or be 'auto'.`);
    }
    if (gpuIdx.some((index) => index < 0)) throw valueError('replica_config[0].devices[0].gpu_idx must be non-negative integers.');
  }
  let label = config.replicaUid;
  if (label !== null) {
    label = label.trim();
    if (!label) throw valueError('replica_config[0].replica_uid must not be empty or whitespace-only.');
  } else {
    label = defaultLabel;
  }
  // core/utils.py, parse_replica_model_uid: `-rep<n>` is the replica suffix; `-rank0` Xavier's rank 0.
  if (/^.+-rep\d+$/.test(label) || label.endsWith('-rank0')) {
    throw valueError(`replica_uid '${label}' collides with a reserved internal replica/rank identifier; please choose another name.`);
  }
  return label;
}

function replicaConfig(raw: Record<string, unknown>, errors: FieldError[]): ReplicaConfig {
  let replicaUid: string | null = null;
  const uid = raw.replica_uid;
  // pydantic v1's str: numbers are turned into strings, anything else refused.
  if (typeof uid === 'string') replicaUid = uid;
  else if (typeof uid === 'number' || typeof uid === 'boolean') replicaUid = pythonStr(uid);
  else if (uid !== undefined && uid !== null) errors.push({ loc: ['replica_uid'], msg: 'str type expected', type: 'type_error.str' });
  const devices: DeviceConfig[] = [];
  if (raw.devices !== undefined) {
    if (!Array.isArray(raw.devices)) errors.push({ loc: ['devices'], msg: 'value is not a valid list', type: 'type_error.list' });
    else raw.devices.forEach((item, index) => devices.push(deviceConfig(item, ['devices', index], errors)));
  }
  extraFields(raw, ['replica_uid', 'devices'], [], errors);
  return { replicaUid, devices };
}

function deviceConfig(raw: unknown, loc: (string | number)[], errors: FieldError[]): DeviceConfig {
  const device: DeviceConfig = { workerIp: '', nGpu: 'auto', gpuIdx: null };
  if (!isRecord(raw)) {
    errors.push({ loc, msg: 'value is not a valid dict', type: 'type_error.dict' });
    return device;
  }
  // The pre-validators raise TypeError or ValueError, which pydantic v1 reports with their message.
  if (raw.worker_ip === undefined) errors.push({ loc: [...loc, 'worker_ip'], msg: 'field required', type: 'value_error.missing' });
  else if (typeof raw.worker_ip !== 'string') errors.push({ loc: [...loc, 'worker_ip'], msg: 'worker_ip must be a string', type: 'type_error' });
  else device.workerIp = raw.worker_ip;
  if (raw.n_gpu !== undefined) {
    if (raw.n_gpu !== 'auto' && !isPythonInt(raw.n_gpu)) errors.push({ loc: [...loc, 'n_gpu'], msg: "n_gpu must be an integer or 'auto'", type: 'type_error' });
    else device.nGpu = raw.n_gpu as number | 'auto';
  }
  const gpuIdx = raw.gpu_idx;
  if (gpuIdx !== undefined && gpuIdx !== null) {
    if (!Array.isArray(gpuIdx)) errors.push({ loc: [...loc, 'gpu_idx'], msg: 'gpu_idx must be a list of integers', type: 'type_error' });
    else if (!gpuIdx.every(isPythonInt)) errors.push({ loc: [...loc, 'gpu_idx'], msg: 'gpu_idx must contain only integers', type: 'type_error' });
    else if (new Set(gpuIdx).size !== gpuIdx.length) errors.push({ loc: [...loc, 'gpu_idx'], msg: 'gpu_idx must not contain duplicate indexes', type: 'value_error' });
    else device.gpuIdx = gpuIdx as number[];
  }
  extraFields(raw, ['worker_ip', 'n_gpu', 'gpu_idx'], loc, errors);
  return device;
}

/** `Config.extra = "forbid"`: each unknown field is an error, after those of the fields. */
function extraFields(raw: Record<string, unknown>, known: string[], loc: (string | number)[], errors: FieldError[]): void {
  for (const key of Object.keys(raw)) if (!known.includes(key)) errors.push({ loc: [...loc, key], msg: 'extra fields not permitted', type: 'value_error.extra' });
}

/** Python's int: a JSON integer, not a boolean (`isinstance(value, bool)` is refused by the validators). */
function isPythonInt(value: unknown): boolean {
  return typeof value === 'number' && Number.isInteger(value);
}

/** Python's `str()` of a JSON number or boolean. */
function pythonStr(value: number | boolean): string {
  if (typeof value === 'boolean') return value ? 'True' : 'False';
  return String(value);
}

/** pydantic v1's `str(ValidationError)`. */
function pydanticMessage(model: string, errors: FieldError[]): string {
  const lines = errors.map((error) => `${error.loc.join(' -> ')}\n  ${error.msg} (type=${error.type})`);
  return `${errors.length} validation error${errors.length === 1 ? '' : 's'} for ${model}\n${lines.join('\n')}`;
}
