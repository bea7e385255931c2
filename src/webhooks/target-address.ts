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

/**
 * Why `address` may not be a webhook target (`a loopback address`…), or undefined when it is a
 * public unicast address.
 * Only ipaddr.js's `unicast` range passes (every special-purpose range of IPv4 and IPv6 is
 * refused: loopback, link-local, private, unique-local, CGNAT, multicast, reserved, documentation,
 * benchmarking, translation and tunnelling prefixes); an IPv4-mapped IPv6 address is judged as
 * the IPv4 address it carries.
 */
export function refusedAddress(address: string): string | undefined {
  if (!isIP(address)) return 'not an IP address';
  let parsed = ipaddr.parse(address);
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) parsed = (parsed as ipaddr.IPv6).toIPv4Address();
  const range = parsed.range();
  if (range === 'unicast') return undefined;
  return `${RANGE_WORDS[range] ?? `a special-purpose (${range})`} address`;
}

/** A target the webhook rules refuse; its message says why, for the admin. */
export class TargetRefused extends Error {}

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
      if (refused) throw new TargetRefused(`resolves to ${address}, ${refused}; webhooks reach public addresses only`);
    }
  }
  return addresses;
}

function lookupAll(host: string): Promise<string[]> {
  return new Promise((resolve, reject) => {
    dnsLookup(host, { all: true, verbatim: true }, (error, addresses) => {
      if (error) reject(new TargetRefused(`has a host that does not resolve (${error.code ?? error.message})`));
      else if (!addresses.length) reject(new TargetRefused('has a host that resolves to no address'));
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
          if (refused) return callback(Object.assign(new TargetRefused(`the host resolves to ${address}, ${refused}; webhooks reach public addresses only`), { code: 'ETARGETREFUSED' }), []);
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
