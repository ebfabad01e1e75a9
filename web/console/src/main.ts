// The bothy web console: entry point of the bundle (assets/console.js).
import { start } from "./app.js";

start(document.getElementById("app"));
