#!/usr/bin/env node
// ONNX Runtime reference for bench/onnx_compat.py: runs one .onnx file on one
// .npy input and prints ONE JSON line on stdout.
//
//   node ort_run.js --model M.onnx --input X.npy [--ref Y.npy] [--threads T]
//                   [--iters I] [--warmup W] [--save-output OUT.npy] [--no-spin]
//
// Output: {"model", "ort", "threads", "input_shape", "output_shape",
//          "max_abs_diff" (vs --ref; null without it), "ref_max_abs",
//          "median_ms" (of --iters timed runs after --warmup), "iters"}
// Threads: intra-op T, inter-op 1, sequential execution, all graph optimizations.
// --no-spin turns off the intra-op pool's spin-waiting (ORT spins by default).
//
// The .npy reader/writer below handles what Tessera writes: little-endian
// float32 ('<f4') and int64 ('<i8'), C order, format versions 1-3.
'use strict';

const fs = require('fs');
const ort = require('onnxruntime-node');

// ---- .npy ------------------------------------------------------------------

const NPY_TYPES = {
  '<f4': { type: 'float32', array: Float32Array },
  '<i8': { type: 'int64', array: BigInt64Array },
};

function readNpy(path) {
  const buf = fs.readFileSync(path);
  if (buf.length < 10 || buf.toString('latin1', 0, 6) !== '\x93NUMPY') {
    throw new Error(`${path}: not a .npy file (missing the \\x93NUMPY magic)`);
  }
  const major = buf[6];
  let headerLen, start;
  if (major === 1) {
    headerLen = buf.readUInt16LE(8);
    start = 10;
  } else if (major === 2 || major === 3) {
    headerLen = buf.readUInt32LE(8);
    start = 12;
  } else {
    throw new Error(`${path}: unsupported .npy format version ${major}`);
  }
  const header = buf.toString('latin1', start, start + headerLen);
  const descr = /'descr':\s*'([^']*)'/.exec(header);
  const fortran = /'fortran_order':\s*(True|False)/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !fortran || !shape) throw new Error(`${path}: cannot parse the header: ${header}`);
  const kind = NPY_TYPES[descr[1]];
  if (!kind) throw new Error(`${path}: dtype '${descr[1]}' not supported (only <f4 and <i8)`);
  if (fortran[1] === 'True') throw new Error(`${path}: Fortran-order arrays are not supported`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s.length > 0).map(Number);
  const numel = dims.reduce((a, b) => a * b, 1);
  const body = start + headerLen;
  const nbytes = numel * kind.array.BYTES_PER_ELEMENT;
  if (buf.length - body !== nbytes) {
    throw new Error(`${path}: ${descr[1]} [${dims}] needs ${nbytes} data bytes, the file has ${buf.length - body}`);
  }
  // Copy into a fresh ArrayBuffer: Buffer's own offset may not be aligned.
  const data = new kind.array(buf.buffer.slice(buf.byteOffset + body, buf.byteOffset + body + nbytes));
  return { type: kind.type, dims, data };
}

function writeNpy(path, type, dims, data) {
  const descr = Object.keys(NPY_TYPES).find((k) => NPY_TYPES[k].type === type);
  if (!descr) throw new Error(`writeNpy: type ${type} not supported (only float32 and int64)`);
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat((64 - ((10 + header.length + 1) % 64)) % 64) + '\n';  // data 64-byte aligned
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(path, Buffer.concat([pre, Buffer.from(header, 'latin1'), bytes]));
}

// ---- command line ------------------------------------------------------------

function parseArgs(argv) {
  const args = { threads: 1, iters: 20, warmup: 3, ref: null, saveOutput: null, spin: true };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--model') args.model = next();
    else if (a === '--input') args.input = next();
    else if (a === '--ref') args.ref = next();
    else if (a === '--threads') args.threads = parseInt(next(), 10);
    else if (a === '--iters') args.iters = parseInt(next(), 10);
    else if (a === '--warmup') args.warmup = parseInt(next(), 10);
    else if (a === '--save-output') args.saveOutput = next();
    else if (a === '--no-spin') args.spin = false;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!args.model || !args.input) throw new Error('usage: ort_run.js --model M.onnx --input X.npy [--ref Y.npy] ...');
  if (!(args.iters >= 1) || !(args.threads >= 1) || !(args.warmup >= 0)) {
    throw new Error('--iters and --threads must be >= 1, --warmup >= 0');
  }
  return args;
}

// ---- measuring ---------------------------------------------------------------

function maxAbsDiff(a, b) {
  if (a.length !== b.length) throw new Error(`output has ${a.length} elements, the reference ${b.length}`);
  let worst = 0;
  for (let i = 0; i < a.length; ++i) {
    const d = Math.abs(Number(a[i]) - Number(b[i]));
    if (!(d <= worst)) worst = d;  // NaN counts as the worst
  }
  return worst;
}

function maxAbs(a) {
  let m = 0;
  for (let i = 0; i < a.length; ++i) m = Math.max(m, Math.abs(Number(a[i])));
  return m;
}

async function medianMs(fn, warmup, iters) {
  for (let i = 0; i < warmup; ++i) await fn();
  const t = [];
  for (let i = 0; i < iters; ++i) {
    const t0 = process.hrtime.bigint();
    await fn();
    t.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  t.sort((a, b) => a - b);
  return t[Math.floor(t.length / 2)];  // the same median as tessera_compile_bench
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const options = {
    intraOpNumThreads: args.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  };
  if (!args.spin) options.extra = { session: { intra_op: { allow_spinning: '0' } } };
  const session = await ort.InferenceSession.create(args.model, options);

  const x = readNpy(args.input);
  const feeds = { [session.inputNames[0]]: new ort.Tensor(x.type, x.data, x.dims) };
  const outName = session.outputNames[0];
  const first = (await session.run(feeds))[outName];

  const res = {
    model: args.model,
    ort: ort.env.versions.node,
    threads: args.threads,
    input_shape: x.dims,
    output_shape: first.dims.map(Number),
    max_abs_diff: null,
    ref_max_abs: null,
  };
  if (args.ref) {
    const ref = readNpy(args.ref);
    if (ref.dims.join(',') !== res.output_shape.join(',')) {
      throw new Error(`output shape [${res.output_shape}] differs from the reference's [${ref.dims}]`);
    }
    res.max_abs_diff = maxAbsDiff(first.data, ref.data);
    res.ref_max_abs = maxAbs(ref.data);
  }
  if (args.saveOutput) writeNpy(args.saveOutput, first.type, res.output_shape, first.data);

  res.median_ms = await medianMs(() => session.run(feeds), args.warmup, args.iters);
  res.iters = args.iters;
  process.stdout.write(JSON.stringify(res) + '\n');
}

main().catch((e) => {
  process.stderr.write(`ort_run.js: ${e.message}\n`);
  process.exit(1);
});
