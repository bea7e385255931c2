import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { parseTargetUrl, refusedAddress, resolveTarget, TARGET_NOT_ALLOWED, TargetRefused } from '../../src/webhooks/target-address.ts';
import { signPayload, webhookHeaders } from '../../src/webhooks/signature.ts';

describe('the webhook target address check', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['0.0.0.0', 'unspecified'],
    ['10.1.2.3', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.254', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.169.254', 'link-local'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['100.127.255.254', 'carrier-grade NAT'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.250', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['192.0.2.10', 'reserved'],
    ['198.18.0.1', 'reserved'],
    ['240.0.0.1', 'reserved'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['fe80::1', 'link-local'],
    ['fc00::1', 'unique-local'],
    ['fd12:3456:789a::1', 'unique-local'],
    ['ff02::1', 'multicast'],
    ['fec0::1', 'site-local'],
    ['2001:db8::1', 'reserved'],
    ['64:ff9b::808:808', 'NAT64'],
    ['2002:808:808::1', '6to4'],
    ['2001:0:4136:e378:8000:63bf:f7f7:f7f7', 'Teredo'],
  ])('refuses %s (%s)', (address, kind) => {
    expect(refusedAddress(address)).toContain(kind);
  });

  it.each([
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:10.0.0.1', 'private'],
    ['::ffff:169.254.169.254', 'link-local'],
    ['::ffff:7f00:1', 'loopback'],
    ['0:0:0:0:0:ffff:c0a8:0101', 'private'],
    ['::7f00:1', 'loopback'],
    ['::a9fe:a9fe', 'link-local'],
    ['::a00:1', 'private'],
    ['64:ff9b::a00:1', 'private'],
    ['64:ff9b:1::7f00:1', 'loopback'],
    ['2002:a9fe:a9fe::1', 'link-local'],
    ['2001:0:4136:e378:8000:63bf:80ff:fffe', 'loopback'],
  ])('judges the IPv4-embedding IPv6 address %s by the IPv4 address it carries (%s)', (address, kind) => {
    expect(refusedAddress(address)).toContain(kind);
  });

  it.each(['93.184.215.14', '8.8.8.8', '1.1.1.1', '172.32.0.1', '100.128.0.1', '2606:4700:4700::1111', '2a00:1450:4001:82b::200e', '::ffff:8.8.8.8'])(
    'accepts the public address %s',
    (address) => {
      expect(refusedAddress(address)).toBeUndefined();
    },
  );

  it.each(['::808:808', '4000::1', '100::1'])('refuses %s, which is not plain public unicast', (address) => {
    expect(refusedAddress(address)).toBeDefined();
  });

  it('refuses what is not an IP address', () => {
    expect(refusedAddress('localhost')).toBe('not an IP address');
  });
});

describe('the webhook URL rules', () => {
  const strict = { allowPrivate: false };
  const open = { allowPrivate: true };

  it('takes an https URL and, only when private targets are allowed, an http one', () => {
    expect(parseTargetUrl('https://hooks.example.com/in', strict).href).toBe('https://hooks.example.com/in');
    expect(() => parseTargetUrl('http://hooks.example.com/in', strict)).toThrow(/https/);
    expect(parseTargetUrl('http://127.0.0.1:9/in', open).protocol).toBe('http:');
  });

  it.each([
    ['ftp://hooks.example.com/', /https/],
    ['https://user:pass@hooks.example.com/', /credentials/],
    ['https://hooks.example.com/#x', /fragment/],
    ['hooks.example.com/in', /absolute/],
  ])('refuses %s', (url, reason) => {
    expect(() => parseTargetUrl(url, strict)).toThrow(reason);
  });

  it('refuses a host that resolves to a loopback address, an IPv6 literal and an IPv4-mapped literal, saying only that it is not allowed', async () => {
    for (const url of ['https://localhost/in', 'https://[::1]/in', 'https://[::ffff:127.0.0.1]/in', 'https://[::127.0.0.1]/in', 'https://2130706433/in', 'https://0x7f.1/in']) {
      // WHATWG URLs read the decimal form of an address as that address.
      const refusal = await resolveTarget(new URL(url), strict).catch((error: unknown) => error);
      expect(refusal).toBeInstanceOf(TargetRefused);
      expect((refusal as TargetRefused).message).toBe(TARGET_NOT_ALLOWED);
      expect(String((refusal as TargetRefused).cause)).toContain('loopback');
    }
  });

  it('refuses a host that does not resolve', async () => {
    await expect(resolveTarget(new URL('https://no-such-host.invalid/in'), strict)).rejects.toBeInstanceOf(TargetRefused);
  });

  it('allows any address when private targets are allowed', async () => {
    await expect(resolveTarget(new URL('http://127.0.0.1:9/in'), open)).resolves.toEqual(['127.0.0.1']);
  });
});

describe('Standard Webhooks signatures', () => {
  it('signs as the standardwebhooks library does, which verifies the headers', () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Tc1YzWkQ8U=';
    const body = '{"test": 2432232314}';
    const timestamp = Math.floor(Date.now() / 1000);
    const library = new Webhook(secret);
    expect(signPayload(secret, 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp, body)).toBe(library.sign('msg_p5jXN8AQM9LWM0D4loKWxJek', new Date(timestamp * 1000), body));
    expect(library.verify(body, webhookHeaders([secret], 'msg_p5jXN8AQM9LWM0D4loKWxJek', timestamp, body))).toEqual({ test: 2432232314 });
  });

  it('sends one signature per secret, separated by a space', () => {
    const headers = webhookHeaders(['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw5Tc1YzWkQ8U=', 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='], 'msg_1', 1, '{}');
    expect(headers['webhook-signature']?.split(' ')).toHaveLength(2);
    expect(headers['webhook-id']).toBe('msg_1');
    expect(headers['webhook-timestamp']).toBe('1');
  });
});
