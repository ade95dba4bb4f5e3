#include "tools/cli/memory_html.h"

#include <algorithm>

#include "tools/cli/memory_timeline.h"

namespace keel::cli {
namespace {

constexpr size_t kMaxPointsPerCore = 800;   // enough for a 1000-pixel-wide chart
constexpr size_t kLargestAtPeak = 12;

nlohmann::json largest_at_peak(const std::vector<LedgerEvent>& events, size_t peak_index) {
  nlohmann::json out = nlohmann::json::array();
  const std::vector<LiveAllocation> live = live_after(events, peak_index);
  for (size_t i = 0; i < live.size() && i < kLargestAtPeak; ++i) {
    out.push_back({{"owner", live[i].owner},
                   {"category", category_name(live[i].category)},
                   {"bytes", live[i].bytes},
                   {"shape", shape_string(live[i].shape)}});
  }
  return out;
}

nlohmann::json series(const std::vector<LedgerEvent>& events) {
  nlohmann::json s = {{"position", nlohmann::json::array()}};
  for (int k = 0; k < kNumCategories; ++k) s[category_name(static_cast<Category>(k))] = nlohmann::json::array();
  for (size_t i : sample_events(events, kMaxPointsPerCore)) {
    s["position"].push_back(i + 1);  // as in the trace: the state after event i is at position i + 1
    for (int k = 0; k < kNumCategories; ++k) {
      s[category_name(static_cast<Category>(k))].push_back(events[i].current[static_cast<size_t>(k)]);
    }
  }
  return s;
}

nlohmann::json core_data(int core, const std::vector<LedgerEvent>& events) {
  const TimelinePeaks peaks = timeline_peaks(events);
  nlohmann::json c = {{"core", core}};
  for (int k = 0; k < kNumCategories; ++k) c[category_name(static_cast<Category>(k))] = peaks.category_peak[static_cast<size_t>(k)];
  c["peak"] = peaks.peak;
  c["peak_position"] = peaks.peak_index + 1;
  c["events"] = events.size();
  c["phases"] = nlohmann::json::array();
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == LedgerEventKind::mark) c["phases"].push_back({{"label", events[i].owner}, {"position", i + 1}});
  }
  c["largest_at_peak"] = largest_at_peak(events, peaks.peak_index);
  c["series"] = series(events);
  return c;
}

// The page: styles, the data block, and the script that draws from it (no external resource).
constexpr const char* kHead = R"HTML(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>keel memory</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:20px 0 6px}
.sub{color:#555;margin-bottom:10px}.grid{display:flex;flex-wrap:wrap;gap:10px}
.core{border:1px solid #ddd;border-radius:4px;padding:4px 6px}.core b{display:block;font-size:13px}
table{border-collapse:collapse;font-size:13px}td,th{padding:2px 8px;border-bottom:1px solid #eee;text-align:right}
td.l,th.l{text-align:left}.legend span{display:inline-block;margin-right:12px}
.sw{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
.over{color:#b00;font-weight:bold}svg text{font-size:10px;fill:#444}
</style></head><body>
<script type="application/json" id="keel-memory-data">)HTML";

constexpr const char* kBody = R"HTML(</script>
<h1 id="title"></h1><div class="sub" id="sub"></div>
<div class="legend" id="legend"></div>
<h2>Bytes in use over the step, per core</h2><div class="grid" id="charts"></div>
<h2>Peaks per core (bytes; each category's own high-water mark, and that of their sum)</h2>
<table id="peaks"></table>
<h2>Largest live allocations at the peak of core <select id="pick"></select></h2>
<table id="largest"></table>
<div id="suggest"></div>
<script>
(function(){"use strict";
const D = JSON.parse(document.getElementById("keel-memory-data").textContent);
const ORDER = ["parameters","optimizer","inputs","gradients","workspace","activations"];
const COLOR = {parameters:"#4e79a7",optimizer:"#76b7b2",inputs:"#edc948",gradients:"#f28e2b",workspace:"#b07aa1",activations:"#e15759"};
const NS = "http://www.w3.org/2000/svg";
function fmt(b){const u=["B","KiB","MiB","GiB","TiB"];let i=0,v=b;while(v>=1024&&i<4){v/=1024;i++;}return (i?v.toFixed(2):v)+" "+u[i];}
function el(tag,attrs,text){const e=tag.startsWith("svg:")?document.createElementNS(NS,tag.slice(4)):document.createElement(tag);
  for(const k in attrs||{})e.setAttribute(k,attrs[k]);if(text!==undefined)e.textContent=text;return e;}
function row(t,cells,head){const r=el("tr");cells.forEach((c,i)=>r.appendChild(el(head?"th":"td",{class:i===0||c.l?"l":""},c.t!==undefined?c.t:c)));t.appendChild(r);}
function header(){
  const b=D.hbm_bytes_per_core;
  document.getElementById("title").textContent="keel memory: "+D.model+" on "+D.device+", "+D.batch_per_core+" per core";
  document.getElementById("sub").textContent=D.cores+(D.cores===1?" core x ":" cores x ")+(b>0?fmt(b)+" HBM":"no budget")+
    "; one steady-state training step, planned; "+(b>0?(D.fits?"fits":"DOES NOT FIT"):"no budget to fit");
  const lg=document.getElementById("legend");
  ORDER.forEach(k=>{const s=el("span");s.appendChild(el("span",{class:"sw",style:"background:"+COLOR[k]}));s.append(k);lg.appendChild(s);});
}
function scale(){
  const top=Math.max(...D.per_core.map(c=>c.peak),1),b=D.hbm_bytes_per_core;
  return (b>0&&b<=1.5*top)?{max:b*1.04,budget:true}:{max:top*1.08,budget:false};
}
function area(svg,c,X,Y){
  const s=c.series,n=s.position.length,base=new Array(n).fill(0);
  ORDER.forEach(k=>{const top=base.map((v,i)=>v+s[k][i]);let d="";
    for(let i=0;i<n;i++){const x=X(s.position[i]),xn=i+1<n?X(s.position[i+1]):x;d+=(i?"L":"M")+x+","+Y(top[i])+"L"+xn+","+Y(top[i]);}
    for(let i=n-1;i>=0;i--){const x=X(s.position[i]),xn=i+1<n?X(s.position[i+1]):x;d+="L"+xn+","+Y(base[i])+"L"+x+","+Y(base[i]);}
    svg.appendChild(el("svg:path",{d:d+"Z",fill:COLOR[k],stroke:"none"}));
    for(let i=0;i<n;i++)base[i]=top[i];});
}
function marks(svg,c,X,Y,sc,W,H){
  c.phases.forEach((p,i)=>{const x=X(p.position),y=12+10*(i%3);svg.appendChild(el("svg:line",{x1:x,x2:x,y1:y-8,y2:H-18,stroke:"#999","stroke-dasharray":"2,2"}));
    svg.appendChild(el("svg:text",{x:x+3,y:y},p.label));});
  const px=X(c.peak_position);svg.appendChild(el("svg:line",{x1:px,x2:px,y1:Y(c.peak),y2:H-18,stroke:"#000"}));
  svg.appendChild(el("svg:text",{x:Math.min(px+3,W-90),y:Math.max(Y(c.peak)+12,46)},"peak "+fmt(c.peak)));
  const b=D.hbm_bytes_per_core;
  if(sc.budget){const y=Y(b);svg.appendChild(el("svg:line",{x1:60,x2:W-4,y1:y,y2:y,stroke:"#b00","stroke-width":1.5,"stroke-dasharray":"6,3"}));
    svg.appendChild(el("svg:text",{x:W-100,y:y-3,style:"fill:#b00"},"budget "+fmt(b)));}
  else if(b>0)svg.appendChild(el("svg:text",{x:W-200,y:12,style:"fill:#b00"},"budget "+fmt(b)+" (off scale, "+(100*c.peak/b).toFixed(2)+"% used)"));
}
function chart(c,sc){
  const W=540,H=200,last=c.events+1,X=p=>60+(W-66)*p/last,Y=v=>(H-18)-(H-58)*v/sc.max;
  const box=el("div",{class:"core"}),svg=el("svg:svg",{width:W,height:H,viewBox:"0 0 "+W+" "+H});
  box.appendChild(el("b",{},"core "+c.core+": peak "+fmt(c.peak)+(D.hbm_bytes_per_core>0?" ("+(100*c.peak/D.hbm_bytes_per_core).toFixed(2)+"% of HBM)":"")));
  [0,0.5,1].forEach(f=>{const v=sc.max*f/1.04,y=Y(v);svg.appendChild(el("svg:line",{x1:60,x2:W-4,y1:y,y2:y,stroke:"#eee"}));
    svg.appendChild(el("svg:text",{x:2,y:y+3},fmt(Math.round(v))));});
  area(svg,c,X,Y);marks(svg,c,X,Y,sc,W,H);
  svg.appendChild(el("svg:text",{x:60,y:H-4},"step position (ledger events: "+c.events+")"));
  box.appendChild(svg);return box;
}
function peaks(){
  const t=document.getElementById("peaks"),b=D.hbm_bytes_per_core;
  row(t,["core"].concat(D.categories,["peak","of HBM"]),true);
  D.per_core.forEach(c=>row(t,[c.core].concat(D.categories.map(k=>c[k]),[c.peak,b>0?{t:(100*c.peak/b).toFixed(2)+"%"}:"-"])));
}
function largest(core){
  const t=document.getElementById("largest");t.textContent="";
  row(t,["#","bytes","size",{t:"category",l:1},{t:"owner",l:1},{t:"shape",l:1}],true);
  D.per_core[core].largest_at_peak.forEach((a,i)=>row(t,[i+1,a.bytes,fmt(a.bytes),{t:a.category,l:1},{t:a.owner,l:1},{t:a.shape,l:1}]));
}
function suggestions(){
  if(!Array.isArray(D.suggestions)||D.suggestions.length===0)return;
  const box=document.getElementById("suggest"),t=el("table"),cols=Object.keys(D.suggestions[0]);
  box.appendChild(el("h2",{},"Suggestions (keel memory --suggest)"));row(t,cols.map(k=>({t:k,l:1})),true);
  D.suggestions.forEach(s=>row(t,cols.map(k=>({t:typeof s[k]==="object"?JSON.stringify(s[k]):String(s[k]),l:1}))));box.appendChild(t);
}
header();const sc=scale(),charts=document.getElementById("charts");D.per_core.forEach(c=>charts.appendChild(chart(c,sc)));peaks();
const pick=document.getElementById("pick");let busiest=0;
D.per_core.forEach((c,i)=>{pick.appendChild(el("option",{value:i},String(c.core)));if(c.peak>D.per_core[busiest].peak)busiest=i;});
pick.value=busiest;largest(busiest);pick.onchange=()=>largest(+pick.value);suggestions();
})();
</script></body></html>
)HTML";

}  // namespace

nlohmann::json memory_report_data(const MemoryPlan& plan, const std::string& model, const nlohmann::json& suggestions) {
  nlohmann::json d = {{"model", model},
                      {"device", plan.device.name},
                      {"cores", plan.device.cores},
                      {"hbm_bytes_per_core", plan.device.hbm_bytes_per_core},
                      {"batch_per_core", plan.batch_per_core},
                      {"fits", plan.fits},
                      {"categories", nlohmann::json::array()},
                      {"per_core", nlohmann::json::array()}};
  for (int k = 0; k < kNumCategories; ++k) d["categories"].push_back(category_name(static_cast<Category>(k)));
  for (size_t c = 0; c < plan.timeline.size(); ++c) d["per_core"].push_back(core_data(static_cast<int>(c), plan.timeline[c]));
  d["suggestions"] = suggestions.is_array() && !suggestions.empty() ? suggestions : nlohmann::json(nullptr);
  return d;
}

std::string memory_report_html(const nlohmann::json& data) {
  // Inside <script>, "</script>" or "<!--" in an owner's name would end or confuse the block; JSON
  // may spell every '<' as \u003c, which no HTML parser reads as markup.
  std::string block;
  for (char ch : data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) {
    if (ch == '<') {
      block += "\\u003c";
    } else {
      block += ch;
    }
  }
  return std::string(kHead) + block + kBody;
}

}  // namespace keel::cli
