// What the dashboard (dashboard.js) and the service's compare view (compare.js) share: the REST API's base, the
// element lookup, a GET that throws the API's one-line error, and a table cell. No build step.
"use strict";
const API = "api/v1";
const $ = (id) => document.getElementById(id);

async function get(path) {
  const response = await fetch(`${API}${path}`, {cache: "no-store"});
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try { message = (await response.json()).error.message; } catch (err) { /* not JSON: the status says it */ }
    throw new Error(`${path.split("?")[0]}: ${message}`);
  }
  return response.json();
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}
