import { describe, expect, it } from 'vitest';
import { versionAtLeast, workerIpFor } from '../../src/adapters/xinference.ts';
import { gpuTypeOf } from '../../src/clusters/gpu-names.ts';

describe('GPU names as NVML reports them', () => {
  it.each([
    ['NVIDIA A100-SXM4-80GB', 'A100'],
    ['NVIDIA A100-SXM4-40GB', 'A100'],
    ['NVIDIA A100-PCIE-40GB', 'A100'],
    ['NVIDIA A100 80GB PCIe', 'A100'],
    ['NVIDIA H100 80GB HBM3', 'H100'],
    ['NVIDIA H100 PCIe', 'H100'],
    ['NVIDIA H100 NVL', 'H100'],
    ['NVIDIA GH200 480GB', 'GH200'],
    ['Tesla T4', 'T4'],
    ['Tesla V100-SXM2-16GB', 'V100'],
    ['NVIDIA A10G', 'A10G'],
    ['NVIDIA A10', 'A10'],
    ['NVIDIA L4', 'L4'],
    ['NVIDIA L40S', 'L40S'],
    ['NVIDIA L40', 'L40'],
    ['NVIDIA RTX A6000', 'A6000'],
  ])('maps "%s" to %s', (name, type) => {
    expect(gpuTypeOf(name)).toBe(type);
  });

  it('knows nothing of a name without a known model number', () => {
    expect(gpuTypeOf('AMD Instinct MI250X')).toBeUndefined();
    expect(gpuTypeOf('unknown')).toBeUndefined();
  });
});

describe('the worker a launch names', () => {
  it('is the full host:port from Xinference 3.2, and the bare host before (brackets of IPv6 dropped)', () => {
    expect(workerIpFor('10.0.0.5:30001', '3.2.0')).toBe('10.0.0.5:30001');
    expect(workerIpFor('[fd00::7]:30001', '3.2.1.dev61+g7ecec16b6')).toBe('[fd00::7]:30001');
    expect(workerIpFor('10.0.0.5:30001', '3.1.0')).toBe('10.0.0.5');
    expect(workerIpFor('[fd00::7]:30001', '3.1.0')).toBe('fd00::7');
    expect(workerIpFor('10.0.0.5:30001', null)).toBe('10.0.0.5');
    expect(workerIpFor('worker-host', '2.12.0')).toBe('worker-host');
  });

  it('reads versions by major and minor', () => {
    expect(versionAtLeast('3.2.0', 3, 2)).toBe(true);
    expect(versionAtLeast('v4.0.1', 3, 2)).toBe(true);
    expect(versionAtLeast('3.1.9', 3, 2)).toBe(false);
    expect(versionAtLeast('unknown', 3, 2)).toBe(false);
  });
});
