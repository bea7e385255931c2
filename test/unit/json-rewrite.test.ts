import { describe, expect, it } from 'vitest';
import { embeddingsAsBase64, imageMediaType, imagesAs, JsonStreamRewriter, type RewritePolicy } from '../../src/inference/json-rewrite.ts';

/** Runs `text` through a rewriter in pieces of `size` characters. */
function rewrite(policy: RewritePolicy, text: string, size = text.length): string {
  const rewriter = new JsonStreamRewriter(policy);
  let out = '';
  for (let i = 0; i < text.length; i += size) out += rewriter.write(text.slice(i, i + size));
  return out + rewriter.end();
}

const keepAll: RewritePolicy = () => ({ kind: 'keep' });

const float32 = (values: number[]) => Buffer.from(new Float32Array(values).buffer).toString('base64');

describe('the streaming JSON rewriter', () => {
  const document = ' {"a" : [1, -2.5e-3, true, null, {"b\\"q": "x\\\\\\"y \\u00e9"}], "empty": {}, "list": [], "n": 0} ';

  it('re-serialises a document unchanged but for whitespace, whatever the chunk boundaries', () => {
    const expected = '{"a":[1,-2.5e-3,true,null,{"b\\"q":"x\\\\\\"y \\u00e9"}],"empty":{},"list":[],"n":0}';
    expect(JSON.parse(expected)).toEqual(JSON.parse(document));
    for (const size of [1, 2, 3, 5, 7, 64]) expect(rewrite(keepAll, document, size), `pieces of ${size}`).toBe(expected);
  });

  it('drops a member with its key, and an array element, keeping the commas right', () => {
    const policy: RewritePolicy = (path) => ((path[0] === 'a' && path[1] === 1) || path[0] === 'n' || path[0] === 'empty' ? { kind: 'drop' } : { kind: 'keep' });
    for (const size of [1, 4, 100]) {
      expect(JSON.parse(rewrite(policy, document, size))).toEqual({ a: [1, true, null, { 'b"q': 'x\\"y é' }], list: [] });
    }
  });

  it('keeps top-level scalars', () => {
    expect(rewrite(keepAll, '42', 1)).toBe('42');
    expect(rewrite(keepAll, '"s"', 1)).toBe('"s"');
  });
});

describe('embeddings as base64 (encoding_format: base64)', () => {
  const values = Array.from({ length: 1000 }, (_, i) => Math.sin(i) / 3);
  const answer = JSON.stringify({
    object: 'list',
    model: 'dep-1',
    data: [
      { index: 0, object: 'embedding', embedding: values },
      { index: 1, object: 'embedding', embedding: [0.5, -1e-7, 3] },
    ],
    usage: { prompt_tokens: 3, total_tokens: 3 },
  });

  it('turns each vector into base64 of its little-endian float32 values, as OpenAI does', () => {
    for (const size of [1, 13, 4096, answer.length]) {
      const out = JSON.parse(rewrite(embeddingsAsBase64, answer, size));
      expect(out.data[0].embedding).toBe(float32(values));
      expect(out.data[1].embedding).toBe(float32([0.5, -1e-7, 3]));
      expect(out.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 });
      expect(out.data[0].object).toBe('embedding');
    }
  });

  it('encodes Python’s NaN and Infinity, which are not JSON, as float32 too', () => {
    const out = JSON.parse(rewrite(embeddingsAsBase64, '{"data":[{"embedding":[1.5, NaN, -Infinity, 2]}]}', 4));
    expect(Array.from(new Float32Array(Uint8Array.from(Buffer.from(out.data[0].embedding, 'base64')).buffer))).toEqual([1.5, Number.NaN, Number.NEGATIVE_INFINITY, 2]);
  });

  it('leaves a sparse embedding (an object) and other arrays alone', () => {
    const sparse = JSON.stringify({ data: [{ index: 0, embedding: { '12': 0.5 } }], extra: [1, 2] });
    expect(JSON.parse(rewrite(embeddingsAsBase64, sparse, 3))).toEqual(JSON.parse(sparse));
  });
});

describe('images as data URLs', () => {
  const jpeg = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00, 0x00, 0x01]);
  const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52]);
  const webp = Buffer.concat([Buffer.from('RIFF'), Buffer.from([0x24, 0, 0, 0]), Buffer.from('WEBPVP8 ')]);
  const answer = JSON.stringify({
    created: 1,
    data: [
      { url: null, b64_json: jpeg.toString('base64') },
      { url: '/root/.xinference/image/a1.png', b64_json: png.toString('base64') },
      { b64_json: webp.toString('base64'), url: null },
    ],
  });

  it('answers url as a data URL with the media type read from the bytes, and never a worker path', () => {
    for (const size of [1, 5, 17, answer.length]) {
      const out = JSON.parse(rewrite(imagesAs('url'), answer, size));
      expect(out).toEqual({
        created: 1,
        data: [
          { url: `data:image/jpeg;base64,${jpeg.toString('base64')}` },
          { url: `data:image/png;base64,${png.toString('base64')}` },
          { url: `data:image/webp;base64,${webp.toString('base64')}` },
        ],
      });
    }
  });

  it('answers b64_json as the bare base64, without the engine’s url', () => {
    const out = JSON.parse(rewrite(imagesAs('b64_json'), answer, 7));
    expect(out.data).toEqual([{ b64_json: jpeg.toString('base64') }, { b64_json: png.toString('base64') }, { b64_json: webp.toString('base64') }]);
  });

  it('reads PNG, JPEG, WebP and GIF from their magic bytes', () => {
    expect(imageMediaType(png)).toBe('image/png');
    expect(imageMediaType(jpeg)).toBe('image/jpeg');
    expect(imageMediaType(webp)).toBe('image/webp');
    expect(imageMediaType(Buffer.from('GIF89a....'))).toBe('image/gif');
    expect(imageMediaType(Buffer.from('hello world!'))).toBe('application/octet-stream');
  });
});
