/**
 * A valid baseline JPEG (JFIF) of one 8x8 block of a single colour: what the simulator's image
 * model draws, since Xinference saves images as JPEG unless they have transparency
 * (`xinference/model/image/utils.py`, `_needs_png`). A uniform block has only DC coefficients, so
 * the encoder is small: quantisation by 1, one DC Huffman table (12 four-bit codes for the
 * categories 0 to 11) and one AC table holding only end-of-block.
 */
export function solidJpeg(red: number, green: number, blue: number): Buffer {
  const y = 0.299 * red + 0.587 * green + 0.114 * blue;
  const cb = 128 - 0.168736 * red - 0.331264 * green + 0.5 * blue;
  const cr = 128 + 0.5 * red - 0.418688 * green - 0.081312 * blue;
  // The DC coefficient of a uniform 8x8 block after level shift: 8 x (value - 128).
  const dcs = [y, cb, cr].map((value) => Math.round(8 * (Math.min(255, Math.max(0, value)) - 128)));

  const bits = new BitWriter();
  for (const dc of dcs) {
    const category = dc === 0 ? 0 : Math.floor(Math.log2(Math.abs(dc))) + 1;
    bits.write(category, 4);
    if (category > 0) bits.write(dc > 0 ? dc : dc + (1 << category) - 1, category);
    bits.write(0, 1); // end of block
  }

  const segment = (marker: number, body: number[]) => [0xff, marker, (body.length + 2) >> 8, (body.length + 2) & 0xff, ...body];
  const jfif = [0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01, 0x00, 0x00];
  const quantisation = [0x00, ...new Array<number>(64).fill(1)];
  const frame = [8, 0, 8, 0, 8, 3, 1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0];
  const dcTable = [0x00, 0, 0, 0, 12, ...new Array<number>(12).fill(0), ...Array.from({ length: 12 }, (_, i) => i)];
  const acTable = [0x10, 1, ...new Array<number>(15).fill(0), 0x00];
  const scan = [3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0];
  return Buffer.from([
    0xff,
    0xd8,
    ...segment(0xe0, jfif),
    ...segment(0xdb, quantisation),
    ...segment(0xc0, frame),
    ...segment(0xc4, dcTable),
    ...segment(0xc4, acTable),
    ...segment(0xda, scan),
    ...bits.bytes(),
    0xff,
    0xd9,
  ]);
}

class BitWriter {
  readonly #bits: number[] = [];

  write(value: number, length: number): void {
    for (let i = length - 1; i >= 0; i--) this.#bits.push((value >> i) & 1);
  }

  /** The bits padded with ones to a whole byte, with each 0xFF byte stuffed with a 0x00. */
  bytes(): number[] {
    const bits = [...this.#bits];
    while (bits.length % 8 !== 0) bits.push(1);
    const out: number[] = [];
    for (let i = 0; i < bits.length; i += 8) {
      const byte = bits.slice(i, i + 8).reduce((acc, bit) => (acc << 1) | bit, 0);
      out.push(byte);
      if (byte === 0xff) out.push(0x00);
    }
    return out;
  }
}
