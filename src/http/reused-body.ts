/**
 * Bodies answered many times unchanged (an organization's kept whole list, `OrganizationListCache`):
 * their JSON is written once, when first sent, and the same bytes are sent after. The heavy
 * organization's 2,001 invitations are 800 KB of JSON: 2.2 ms to write, and a new 800 KB string
 * per answer for the garbage collector.
 */
const json = new WeakMap<object, Buffer | undefined>();

/** Marks `body` as answered unchanged from now on: it must not be changed after this. */
export function markReused<T extends object>(body: T): T {
  if (!json.has(body)) json.set(body, undefined);
  return body;
}

/** The JSON of a body marked reused (written on first use), as `res.json` writes it; undefined for any other body. */
export function reusedJson(body: unknown): Buffer | undefined {
  if (typeof body !== 'object' || body === null || !json.has(body)) return undefined;
  let bytes = json.get(body);
  if (!bytes) json.set(body, (bytes = Buffer.from(JSON.stringify(body))));
  return bytes;
}
