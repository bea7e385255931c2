import type { Request } from 'express';
import ipaddr from 'ipaddr.js';

/**
 * The client's address for per-address limits (behind a proxy, as `TRUST_PROXY` allows), as the
 * key those limits count under: an IPv4 address as it is (an IPv4-mapped IPv6 address as the IPv4
 * address it carries), an IPv6 address as its /64 (`2001:db8:1:2::/64`), the block one client
 * normally holds, so the 2^64 addresses of one network count as one.
 */
export function clientAddress(req: Request): string {
  return addressKey(req.ip ?? req.socket.remoteAddress ?? 'unknown');
}

/** The key per-address limits count `address` under (see clientAddress); anything unparsable as it is. */
export function addressKey(address: string): string {
  if (!ipaddr.isValid(address)) return address;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  const network = (parsed as ipaddr.IPv6).toByteArray().slice(0, 8).concat(Array(8).fill(0));
  return `${ipaddr.fromByteArray(network).toString()}/64`;
}
