// Build the inbox page into dist/ (git-ignored): one bundled, minified script plus the
// static files. Run by `npm run build` (after the type check), from `make install`.
import { build } from "esbuild";
import { cpSync, mkdirSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

const out = new URL("./dist/", import.meta.url);
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [here("./src/main.tsx")],
  bundle: true,
  minify: true,
  sourcemap: true,
  format: "esm",
  target: ["es2022"],
  define: { "process.env.NODE_ENV": '"production"' },
  outfile: here("./dist/inbox.js"),
  logLevel: "warning",
});
for (const name of ["index.html", "inbox.css"]) {
  cpSync(new URL(`./src/${name}`, import.meta.url), new URL(name, out));
}
