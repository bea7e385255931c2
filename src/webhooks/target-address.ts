import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/** The names of the ranges a webhook may not reach, as ipaddr.js names them, in words. */
const RANGE_WORDS: Record<string, string> = {
  unspecified: 'an unspecified',
  broadcast: 'a broadcast',
  multicast: 'a multicast',
  linkLocal: 'a link-local',
  loopback: 'a loopback',
  carrierGradeNat: 'a carrier-grade NAT (CGNAT)',
  private: 'a private',
  uniqueLocal: 'a unique-local',
  deprecatedSiteLocal: 'a site-local',
  reserved: 'a reserved',
  rfc6145: 'an IPv4-translated',
  rfc6052: 'a NAT64',
  '6to4': 'a 6to4',
  teredo: 'a Teredo',
};

/** The IPv4 address an IPv6 address carries, by the form that embeds it, or undefined for none. */
export function embeddedIPv4(address: ipaddr.IPv6): ipaddr.IPv4 | undefined {
  const bytes = address.toByteArray();
  const last32 = (bytes: number[]) => new ipaddr.IPv4(bytes.slice(-4));
  // IPv4-mapped ::ffff:0:0/96, IPv4-translated ::ffff:0:0:0/96 (RFC 6145), IPv4-compatible ::/96,
  // NAT64 64:ff9b::/96 and the local-use NAT64 64:ff9b:1::/48 (RFC 6052, RFC 8215): the last 32 bits.
  if (address.isIPv4MappedAddress() || address.match(ipaddr.IPv6.parse('::ffff:0:0:0'), 96)) return last32(bytes);
  if (address.match(ipaddr.IPv6.parse('::'), 96) && !['unspecified', 'loopback'].includes(address.range())) return last32(bytes);
  if (address.match(ipaddr.IPv6.parse('64:ff9b::'), 96) || address.match(ipaddr.IPv6.parse('64:ff9b:1::'), 48)) return last32(bytes);
  // 6to4 2002::/16: bits 16-47.
  if (address.match(ipaddr.IPv6.parse('2002::'), 16)) return new ipaddr.IPv4(bytes.slice(2, 6));
  // Teredo 2001::/32: the client's address, inverted, in the last 32 bits.
  if (address.match(ipaddr.IPv6.parse('2001::'), 32)) return new ipaddr.IPv4(bytes.slice(-4).map((byte) => byte ^ 0xff));
  return undefined;
}

/** Global unicast IPv6 (2000::/3): the only IPv6 block a public host is addressed from. */
const GLOBAL_UNICAST = ipaddr.IPv6.parse('2000::');

/**
 * Why `address` may not be a webhook target (`a loopback address`…), or undefined when it is a
 * public unicast address. The reason is for the log: the API answers only that the target is not
 * allowed, so the check tells nobody what an internal name resolves to. Only ipaddr.js's `unicast`
 * range passes, IPv6 only within 2000::/3, and an IPv6 address that embeds an IPv4 one is judged as
 * that IPv4 address (docs/events-and-webhooks.md, SSRF).
 */
export function refusedAddress(address: string): string | undefined {
  if (!isIP(address)) return 'not an IP address';
  const parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv4') return refusedRange(parsed);
  const ipv6 = parsed as ipaddr.IPv6;
  const carried = embeddedIPv4(ipv6);
  if (carried) {
    const refused = refusedRange(carried);
    if (refused) return `${refused} (carried by ${address})`;
    if (ipv6.isIPv4MappedAddress()) return undefined;
  }
  const refused = refusedRange(ipv6);
  if (refused) return refused;
  return ipv6.match(GLOBAL_UNICAST, 3) ? undefined : 'an IPv6 address outside global unicast (2000::/3)';
}

function refusedRange(address: ipaddr.IPv4 | ipaddr.IPv6): string | undefined {
  const range = address.range();
  if (range === 'unicast') return undefined;
  return `${RANGE_WORDS[range] ?? `a special-purpose (${range})`} address`;
}

/** A target the webhook rules refuse; its message says why, for the admin. */
export class TargetRefused extends Error {}

/**
 * What the admin is told of a host that does not resolve or resolves to an address that is not
 * public: one fixed message, so the check is no oracle of what internal names resolve to (the
 * reason is the error's `cause`).
 */
export const TARGET_NOT_ALLOWED = 'is not an allowed target: webhooks reach hosts that resolve only to public addresses';

const notAllowed = (reason: string) => new TargetRefused(TARGET_NOT_ALLOWED, { cause: reason });

/** The rules a webhook URL is held to. */
export interface TargetPolicy {
  /** Any address and plain http are allowed (WEBHOOK_ALLOW_PRIVATE_TARGETS). */
  allowPrivate: boolean;
}

/**
 * The URL as a webhook target, or TargetRefused saying why: https (http only when private
 * targets are allowed), no credentials, no fragment. The host is not resolved here.
 */
export function parseTargetUrl(raw: string, policy: TargetPolicy): URL {
  if (!URL.canParse(raw)) throw new TargetRefused('must be an absolute URL');
  const url = new URL(raw);
  if (url.protocol !== 'https:' && !(policy.allowPrivate && url.protocol === 'http:')) throw new TargetRefused('must be an https URL');
  if (url.username || url.password) throw new TargetRefused('must not carry credentials');
  if (url.hash) throw new TargetRefused('must not have a fragment');
  if (!url.hostname) throw new TargetRefused('must name a host');
  return url;
}

/** The host of a URL without the brackets of an IPv6 literal. */
const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, '$1');

/**
 * Every address the URL's host resolves to, or TargetRefused when it does not resolve or any of
 * them is not public (unless the policy allows private targets). A host that resolves to one
 * public and one private address is refused: a delivery could reach either.
 */
export async function resolveTarget(url: URL, policy: TargetPolicy): Promise<string[]> {
  const host = hostOf(url);
  const addresses = isIP(host) ? [host] : await lookupAll(host);
  if (!policy.allowPrivate) {
    for (const address of addresses) {
      const refused = refusedAddress(address);
      if (refused) throw notAllowed(`resolves to ${address}, ${refused}`);
    }
  }
  return addresses;
}

function lookupAll(host: string): Promise<string[]> {
  return new Promise((resolve, reject) => {
    dnsLookup(host, { all: true, verbatim: true }, (error, addresses) => {
      if (error) reject(notAllowed(`has a host that does not resolve (${error.code ?? error.message})`));
      else if (!addresses.length) reject(notAllowed('has a host that resolves to no address'));
      else resolve(addresses.map((entry) => entry.address));
    });
  });
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for the HTTP client that refuses, at connection time, a host resolving to an address
 * the policy refuses: the address checked is the one connected to, so a DNS answer that changed
 * since the endpoint was saved (DNS rebinding) reaches nothing private. (An IP literal is not
 * looked up: the caller checks it.)
 */
export function guardedLookup(policy: TargetPolicy) {
  return (hostname: string, options: { all?: boolean; family?: number | string }, callback: LookupCallback): void => {
    dnsLookup(hostname, { all: true, verbatim: true, family: Number(options.family) || 0 }, (error, addresses) => {
      if (error) return callback(error, []);
      if (!policy.allowPrivate) {
        for (const { address } of addresses) {
          const refused = refusedAddress(address);
          if (refused) return callback(Object.assign(notAllowed(`the host resolves to ${address}, ${refused}`), { code: 'ETARGETREFUSED' }), []);
        }
      }
      const [first] = addresses;
      if (options.all) return callback(null, addresses);
      if (!first) return callback(Object.assign(new Error('the host resolves to no address'), { code: 'ENOTFOUND' }), []);
      return callback(null, first.address, first.family);
    });
  };
}

export { hostOf };
