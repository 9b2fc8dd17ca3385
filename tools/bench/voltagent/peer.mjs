// The VoltAgent peer of the benchmarks: times VoltAgent's libSQL adapters on the requests the
// Rust harness sends, one JSON object per line on stdin. Each reply is one line on stdout,
// prefixed "@@" (anything else there is a library's log and is ignored). Times are measured
// here, around the adapter calls only, so the pipe costs the peer nothing.
import { createInterface } from "node:readline";
import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { LibSQLMemoryAdapter, LibSQLVectorAdapter } from "@voltagent/libsql";

let memory;
let vectors;

const now = () => process.hrtime.bigint();
const micros = (from, to) => Number(to - from) / 1000;

// Runs jobs on `clients` concurrent loops (job i on loop i mod clients), timing each.
async function runClients(clients, jobs, op) {
  const queues = Array.from({ length: Math.max(1, clients) }, () => []);
  jobs.forEach((job, i) => queues[i % queues.length].push(job));
  const latencies = [];
  const started = now();
  await Promise.all(
    queues.map(async (queue) => {
      for (const job of queue) {
        const t = now();
        await op(job);
        latencies.push(micros(t, now()));
      }
    }),
  );
  return { latencies, elapsed: micros(started, now()) };
}

function readMatrix(path, count, dims) {
  const bytes = readFileSync(path);
  const floats = new Float32Array(bytes.buffer, bytes.byteOffset, count * dims);
  return Array.from({ length: count }, (_, i) => Array.from(floats.subarray(i * dims, (i + 1) * dims)));
}

// Sets the memory adapter's durability. The PRAGMA holds for the client's connection, which
// libSQL's client keeps for every call but `transaction()` (the adapter does not use it); it is
// read back, so a round never runs at another setting than it says.
async function setSynchronous(synchronous) {
  const expected = { NORMAL: 1, FULL: 2 }[synchronous];
  if (expected === undefined) throw new Error(`synchronous ${synchronous}`);
  await memory.client.execute(`PRAGMA synchronous = ${synchronous}`);
  const setting = (await memory.client.execute("PRAGMA synchronous")).rows[0].synchronous;
  if (setting !== expected) throw new Error(`synchronous = ${synchronous} did not hold: ${setting}`);
}

const handlers = {
  async open({ dir }) {
    memory = new LibSQLMemoryAdapter({ url: `file:${dir}/voltagent-memory.db` });
    vectors = new LibSQLVectorAdapter({ url: `file:${dir}/voltagent-vectors.db` });
    // The adapter sets its PRAGMAs (WAL among them) when it initializes; ours come after.
    await memory.initialize();
    await setSynchronous("NORMAL");
    return {};
  },
  async create({ threads }) {
    for (const [userId, id] of threads) {
      await memory.createConversation({ id, resourceId: "bench", userId, title: "", metadata: {} });
    }
    return {};
  },
  // `synchronous` is the durability the round runs at: NORMAL (as our stores run, and the
  // default: W2 fills its threads so) or FULL (as VoltAgent ships: WAL and SQLite's default);
  // every other round runs at NORMAL.
  async append({ clients, jobs, synchronous = "NORMAL" }) {
    await setSynchronous(synchronous);
    try {
      return await runClients(clients, jobs, ([userId, conversationId, texts]) =>
        memory.addMessages(
          texts.map((text) => ({ id: randomUUID(), role: "user", parts: [{ type: "text", text }] })),
          userId,
          conversationId,
        ),
      );
    } finally {
      await setSynchronous("NORMAL");
    }
  },
  async load({ userId, conversationId, limit, loads }) {
    return runClients(1, Array.from({ length: loads }), async () => {
      const window = await memory.getMessages(userId, conversationId, { limit });
      if (window.length !== limit) throw new Error(`loaded ${window.length}, not ${limit}`);
    });
  },
  async working({ ops }) {
    return runClients(1, ops, ([userId, content]) =>
      content === null
        ? memory.getWorkingMemory({ userId, scope: "user" })
        : memory.setWorkingMemory({ userId, content, scope: "user" }),
    );
  },
  async vectors_load({ path, count, dims }) {
    const rows = readMatrix(path, count, dims);
    const started = now();
    for (let i = 0; i < rows.length; i += 1000) {
      await vectors.storeBatch(
        rows.slice(i, i + 1000).map((vector, j) => ({
          id: String(i + j),
          vector,
          metadata: { bucket: (i + j) % 100, decile: (i + j) % 10 },
        })),
      );
    }
    return { elapsed: micros(started, now()) };
  },
  async search({ path, offset, count, dims, k, clients, filter }) {
    const queries = readMatrix(path, offset + count, dims).slice(offset);
    const found = new Array(queries.length);
    const round = await runClients(clients, queries.map((q, i) => [i, q]), async ([i, q]) => {
      const hits = await vectors.search(q, filter ? { limit: k, filter } : { limit: k });
      found[i] = hits.map((h) => Number(h.id));
    });
    return { ...round, found };
  },
};

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const request = JSON.parse(line);
  try {
    const reply = await handlers[request.op](request);
    process.stdout.write(`@@${JSON.stringify({ ok: true, ...reply })}\n`);
  } catch (error) {
    process.stdout.write(`@@${JSON.stringify({ ok: false, error: String(error?.stack ?? error) })}\n`);
  }
}
