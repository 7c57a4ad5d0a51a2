// The journey of a user of the mesh, from TypeScript over gRPC: register a warehouse, submit a
// workflow, watch it to its end, read a result as a page (JSON rows) and as a stream (Arrow
// IPC), and read the details of a refused request.
//
// Input on stdin: the JSON that `texera-lake dev user NAME` prints (the gateway's address, the
// user's token, a bucket's storage profile and keys), so that no secret is on a command line.
// The one argument, if any, is a computing unit of the user's (or shared with the user) to run
// on; without it the workflow runs on the user's default unit. Output on stdout: one JSON
// object per step.
//
// The gateway is reached over TLS (1.2 or later), its certificate verified with the CA of
// --ca-file, else of TEXERA_LAKE_CA_FILE, else the embedded stack's (tls.ca of stack.json in
// TEXERA_LAKE_STACK_STATE_DIR, .stack by default), else Node.js's roots. Plaintext only with
// --plaintext, for a stack started without TLS (texera-lake-stack up --plaintext), for debugging.
//
//   texera-lake dev user carol |
//     node clients/typescript/dist/journey.js [unit id] [--ca-file CA | --plaintext]

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { create, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, type GrpcTransportOptions } from "@connectrpc/connect-node";
import { tableFromIPC } from "apache-arrow";

import { BadRequestSchema, ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { ExecutionState } from "./gen/texera/lake/v1/execution_pb.js";
import {
  ExecutionService,
  SubmitExecutionRequestSchema,
} from "./gen/texera/lake/v1/execution_service_pb.js";
import { ResultService } from "./gen/texera/lake/v1/result_service_pb.js";
import {
  CreateWarehouseRequestSchema,
  WarehouseService,
} from "./gen/texera/lake/v1/warehouse_service_pb.js";

interface DevUser {
  user_id: string;
  token: string;
  gateway: string;
  storage: JsonObject;
  credentials: JsonObject;
}

const MINUTES = 60_000;

function report(step: string, facts: Record<string, unknown>): void {
  console.log(JSON.stringify({ step, ...facts }, (_, v) => (typeof v === "bigint" ? v.toString() : v)));
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

// The CA of the embedded stack whose state folder is TEXERA_LAKE_STACK_STATE_DIR (.stack by
// default): undefined when no stack.json is there; an error when the stack serves plaintext.
function stackCa(): string | undefined {
  const folder = process.env.TEXERA_LAKE_STACK_STATE_DIR || ".stack";
  const file = join(folder, "stack.json");
  if (!existsSync(file)) return undefined;
  const endpoints = JSON.parse(readFileSync(file, "utf8")) as {
    tls?: { enabled?: boolean; ca?: string };
  };
  const tls = endpoints.tls;
  if (!tls?.enabled || !tls.ca) {
    throw new Error(`the stack in ${folder} serves plaintext: pass --plaintext (for debugging only)`);
  }
  return tls.ca;
}

// How the client reaches the gateway: TLS verified with the CA of caFile, else of
// TEXERA_LAKE_CA_FILE, else the embedded stack's, else Node.js's roots; plaintext only when
// asked for.
function connection(
  gateway: string,
  plaintext: boolean,
  caFile: string | undefined,
): Pick<GrpcTransportOptions, "baseUrl" | "nodeOptions"> {
  if (plaintext) return { baseUrl: `http://${gateway}` };
  const ca = caFile || process.env.TEXERA_LAKE_CA_FILE || stackCa();
  return {
    baseUrl: `https://${gateway}`,
    nodeOptions: { minVersion: "TLSv1.2", ...(ca ? { ca: readFileSync(ca) } : {}) },
  };
}

// A workflow written as protobuf JSON: a range of numbers and their squares, and a small
// inline table whose numbers reach the unit intact (see the README on keepCase).
const WORKFLOW: JsonObject = {
  workflow_id: "typescript-journey",
  operators: [
    { operator_id: "n", range_source: { end: 1000 } },
    {
      operator_id: "sq",
      input_operator_ids: ["n"],
      materialize: true,
      projection: { columns: [{ expression: "id" }, { expression: "id * id", alias: "sq" }] },
    },
    {
      operator_id: "prices",
      materialize: true,
      inline_source: {
        columns: [
          { name: "item", data_type: "string" },
          { name: "price", data_type: "double" },
        ],
        rows: [["tea", 2.5], ["cake", null], ["bread", 4]],
      },
    },
  ],
};

async function main(): Promise<void> {
  const { values: options, positionals } = parseArgs({
    allowPositionals: true,
    options: { "ca-file": { type: "string" }, plaintext: { type: "boolean", default: false } },
  });
  if (options.plaintext && options["ca-file"]) {
    throw new Error("--plaintext and --ca-file exclude each other");
  }
  const user = JSON.parse(await readStdin()) as DevUser;
  const authenticate: Interceptor = (next) => async (request) => {
    request.header.set("authorization", `Bearer ${user.token}`);
    return next(request);
  };
  const transport = createGrpcTransport({
    ...connection(user.gateway, options.plaintext, options["ca-file"]),
    interceptors: [authenticate],
  });
  const warehouses = createClient(WarehouseService, transport);
  const executions = createClient(ExecutionService, transport);
  const results = createClient(ResultService, transport);

  const { warehouse } = await warehouses.createWarehouse(
    fromJson(CreateWarehouseRequestSchema, {
      warehouse: { display_name: "from TypeScript", storage: user.storage },
      credentials: user.credentials,
    }),
    { timeoutMs: 2 * MINUTES },
  );
  const warehouseId = warehouse!.warehouseId;
  report("warehouse", { warehouse_id: warehouseId });

  const submission: JsonObject = {
    warehouse_id: warehouseId,
    computing_unit_id: positionals[0] ?? "",
    workflow: WORKFLOW,
  };
  const { execution } = await executions.submitExecution(
    fromJson(SubmitExecutionRequestSchema, submission),
    { timeoutMs: 5 * MINUTES },
  );
  const executionId = execution!.executionId;
  report("submitted", { execution_id: executionId });

  let last = execution!;
  for await (const event of executions.watchExecution({ executionId }, { timeoutMs: 10 * MINUTES })) {
    last = event.execution!;
    const progress = last.progress;
    report("watch", {
      state: ExecutionState[last.state],
      tasks_completed: progress?.tasksCompleted ?? 0,
      tasks_total: progress?.tasksTotal ?? 0,
    });
  }
  if (last.state !== ExecutionState.SUCCEEDED) {
    throw new Error(`execution ${executionId} ended ${ExecutionState[last.state]}`);
  }

  const page = await results.readResultPage(
    { executionId, operatorId: "prices", pageSize: 10 },
    { timeoutMs: MINUTES },
  );
  report("page", { rows: page.rows }); // google.protobuf.Struct arrives as a plain object

  const chunks: Uint8Array[] = [];
  for await (const message of results.streamResult(
    { executionId, operatorId: "sq" },
    { timeoutMs: 5 * MINUTES },
  )) {
    chunks.push(message.arrowIpc);
  }
  const table = tableFromIPC(Buffer.concat(chunks));
  let sum = 0n;
  for (const square of table.getChild("sq")!) sum += BigInt(square as bigint | number);
  report("stream", {
    messages: chunks.length,
    rows: table.numRows,
    columns: table.schema.fields.map((field) => field.name),
    sum_of_squares: sum,
  });

  // A row value with no kind, as protobufjs sends one when it drops a field name it does not
  // know: refused, and the details say which field.
  const careless = fromJson(SubmitExecutionRequestSchema, submission);
  const prices = careless.workflow!.operators.find((op) => op.operatorId === "prices")!;
  if (prices.kind.case !== "inlineSource") throw new Error("the workflow has no inline source");
  prices.kind.value.rows[0].values[1] = create(ValueSchema);
  try {
    await executions.submitExecution(careless, { timeoutMs: MINUTES });
    throw new Error("a value of no kind was accepted");
  } catch (error) {
    const refused = ConnectError.from(error);
    if (refused.code !== Code.InvalidArgument) throw error;
    report("refused", {
      code: Code[refused.code],
      fields: refused.findDetails(BadRequestSchema).flatMap((d) => d.fieldViolations.map((v) => v.field)),
      reasons: refused.findDetails(ErrorInfoSchema).map((info) => info.reason),
    });
  }
}

main().catch((error: unknown) => {
  if (error instanceof ConnectError) {
    console.error(`error: ${Code[error.code]}: ${error.rawMessage}`);
  } else {
    console.error(`error: ${error instanceof Error ? error.message : String(error)}`);
  }
  process.exit(1);
});
