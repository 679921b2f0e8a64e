"use strict";
(function () {
	var SVG = "http://www.w3.org/2000/svg", PERIOD = 1000;
	var samples = [];	// oldest first, the newest is the one shown

	function $(id) { return document.getElementById(id); }

	// Data only ever reaches the page through textContent and
	// setAttribute: key and client names are user input.
	function el(tag, cls, text) {
		var e = document.createElement(tag);
		if (cls) e.className = cls;
		if (text !== undefined) e.textContent = String(text);
		return e;
	}

	function svg(tag, attrs, text) {
		var e = document.createElementNS(SVG, tag);
		for (var a in attrs) e.setAttribute(a, attrs[a]);
		if (text !== undefined) e.textContent = String(text);
		return e;
	}

	function fill(node, kids) {
		node.replaceChildren.apply(node, kids);
	}

	function ms(v) {
		if (v < 1000) return v + " ms";
		if (v < 60000) return (v / 1000).toFixed(v < 10000 ? 2 : 1) + " s";
		if (v < 3600000) return Math.floor(v / 60000) + "m " +
		    Math.floor(v % 60000 / 1000) + "s";
		if (v < 86400000) return Math.floor(v / 3600000) + "h " +
		    Math.floor(v % 3600000 / 60000) + "m";
		return Math.floor(v / 86400000) + "d " +
		    Math.floor(v % 86400000 / 3600000) + "h";
	}

	function num(v) {
		return v >= 1e4 ? v.toLocaleString("en") : String(v);
	}

	// /status.json's "names": false when status-names is off.
	var names = true;

	function who(c) {
		var s = el("span");
		s.append("#" + c.client + " ");
		s.append(c.name === null ? el("span", "dim",
		    names ? "(no name)" : "(name hidden)") :
		    el("span", "name", c.name));
		if (c.detached_ms !== undefined)
			s.append(" ", el("span", "detached",
			    "(session detached " + ms(c.detached_ms) + ")"));
		return s;
	}

	// Keeps the newest sample at least a second older than s, so rates
	// span a second or more of the server's own clock (uptime_ms).
	function remember(s) {
		var last = samples[samples.length - 1];
		if (last && s.uptime_ms < last.uptime_ms) samples = [];
		samples.push(s);
		while (samples.length > 2 &&
		    samples[1].uptime_ms <= s.uptime_ms - 1000)
			samples.shift();
	}

	function rate(s, name) {
		var p = samples[0];
		if (p === s || s.uptime_ms <= p.uptime_ms || s[name] < p[name])
			return "\u2013";
		var r = (s[name] - p[name]) * 1000 / (s.uptime_ms - p.uptime_ms);
		return r < 10 ? r.toFixed(1) : num(Math.round(r));
	}

	function tiles(s) {
		var t = [
			["clients", num(s.clients)], ["keys", num(s.keys)],
			["held", num(s.held)], ["waiting", num(s.waiting)],
			["sessions", num(s.sessions)],
			["detached", num(s.sessions_detached)],
			["requests/s", rate(s, "requests")],
			["grants/s", rate(s, "grants")],
			["timeouts/s", rate(s, "timeouts")],
			["errors/s", rate(s, "errors")],
			["connections/s", rate(s, "connections")],
			["uptime", ms(s.uptime_ms)]
		];
		fill($("tiles"), t.map(function (x) {
			var d = el("div", "tile");
			d.dataset.name = x[0];
			d.append(el("b", "", x[1]), el("span", "", x[0]));
			return d;
		}));
	}

	function more(list, shown, total, what) {
		if (total > shown)
			list.append(el("li", "more dim", "and " + num(total - shown) +
			    " more " + what + (total - shown > 1 ? "s" : "")));
	}

	function card(k, hot) {
		var c = el("article", "card"), ul = el("ul", "holders"),
		    ol = el("ol", "waiters");
		c.append(el("p", "key", k.key));
		c.append(el("div", "dim", k.holders_total + " holding, " +
		    k.waiters_total + " waiting" + (hot ? " (most ever " +
		    hot.max_waiters + "), " + ms(hot.wait_ms_total) +
		    " waited in all" : "")));
		k.holders.forEach(function (h) {
			var li = el("li", "holder");
			li.append(who(h), " " + h.mode + ", held " + ms(h.held_ms) +
			    (h.expires_in_ms ? ", expires in " +
			    ms(h.expires_in_ms) : ""));
			ul.append(li);
		});
		more(ul, k.holders.length, k.holders_total, "holder");
		k.waiters.forEach(function (w) {
			var li = el("li", "waiter");
			li.append(who(w), " " + w.mode + ", waiting " +
			    ms(w.waited_ms));
			ol.append(li);
		});
		more(ol, k.waiters.length, k.waiters_total, "waiter");
		if (k.holders.length || k.holders_total) c.append(ul);
		if (k.waiters.length || k.waiters_total) {
			c.append(el("div", "dim", "waiting, in queue order:"));
			c.append(ol);
		}
		return c;
	}

	function keys(d) {
		var cards = d.keys.map(function (k, i) {
			return card(k, d.stats.hot_keys[i]);
		});
		if (!cards.length)
			cards = [el("p", "dim", "No key is held or waited for.")];
		fill($("keys"), cards);
	}

	function label(ub) {
		if (ub === null) return "\u221e";
		return ub >= 1000 ? ub / 1000 + "s" : String(ub);
	}

	// p-th quantile as the upper bound of the bucket that holds it.
	function quantile(h, p) {
		var want = h.count * p, cum = 0;
		for (var i = 0; i < h.buckets.length; i++) {
			cum += h.buckets[i][1];
			if (cum >= want && cum > 0) {
				var ub = h.buckets[i][0];
				return ub === null ? "over 60 s" : "\u2264 " + ms(ub);
			}
		}
		return "\u2013";
	}

	function short(v) {
		return v < 1000 ? String(v) : v < 1e6 ?
		    +(v / 1e3).toPrecision(2) + "k" : +(v / 1e6).toPrecision(2) + "M";
	}

	// Bars on a log scale, so that a bucket of one beside one of
	// thousands still shows; each is labelled with its count.
	function chart(id, title, h) {
		var W = 320, H = 150, top = 16, base = 120, n = h.buckets.length,
		    bw = W / n, max = 1, g = svg("svg", {
			viewBox: "0 0 " + W + " " + H, role: "img",
			"aria-label": title + " histogram"
		    });
		h.buckets.forEach(function (b) { max = Math.max(max, b[1]); });
		g.append(svg("line", { x1: 0, x2: W, y1: base, y2: base,
		    "class": "axis" }));
		h.buckets.forEach(function (b, i) {
			var bh = b[1] ? Math.max(2, (base - top) *
			    Math.log(1 + b[1]) / Math.log(1 + max)) : 0,
			    r = svg("rect", { "class": "bar", x: i * bw + 1,
			    y: base - bh, width: bw - 2, height: bh,
			    "data-count": b[1] });
			r.append(svg("title", {}, (b[0] === null ? "over 60000" :
			    "\u2264 " + b[0]) + " ms: " + b[1]));
			g.append(r);
			if (b[1]) g.append(svg("text", { x: i * bw + bw / 2,
			    y: base - bh - 3, "text-anchor": "middle" },
			    short(b[1])));
			g.append(svg("text", { x: i * bw + bw / 2, y: base + 12,
			    "text-anchor": "middle" }, label(b[0])));
		});
		g.append(svg("text", { x: W / 2, y: H - 4,
		    "text-anchor": "middle" }, "ms, bucket upper bound; " +
		    "counts on a log scale"));
		fill($(id), [
			el("div", "", title),
			el("div", "dim", num(h.count) + " in all, mean " +
			    (h.count ? ms(Math.round(h.sum_ms / h.count)) :
			    "\u2013") + ", p50 " + quantile(h, 0.5) + ", p99 " +
			    quantile(h, 0.99)),
			g
		]);
	}

	function render(d) {
		var s = d.stats;
		names = d.names !== false;
		$("version").textContent = "version " + s.version +
		    (s.backend ? ", " + s.backend + " backend" : "");
		// A front end that cannot reach its store still answers: say
		// so first, in the header and the tab's title.
		$("backend").hidden = s.backend_ready !== 0;
		$("backend").textContent = s.backend_ready === 0 ? "cut off " +
		    "from the " + s.backend + " backend: LOCK is ERR BACKEND" :
		    "";
		document.title = (s.backend_ready === 0 ? "CUT OFF: " : "") +
		    "keylockd: " + s.held + " held, " + s.waiting + " waiting";
		remember(s);
		tiles(s);
		keys(d);
		chart("wait", "Wait time (request to grant)", s.wait_ms);
		chart("hold", "Hold time (grant to release)", s.hold_ms);
		$("state").className = "dim";
		$("state").textContent = "updated " +
		    new Date().toLocaleTimeString();
	}

	// A hidden tab asks nothing; it catches up when shown again.
	function tick() {
		if (document.hidden) {
			setTimeout(tick, PERIOD);
			return;
		}
		fetch("status.json", { cache: "no-store" }).then(function (r) {
			if (!r.ok) throw new Error("HTTP " + r.status);
			return r.json();
		}).then(render).catch(function (e) {
			$("state").className = "err";
			$("state").textContent = "cannot reach the server (" +
			    e.message + "); retrying";
		}).then(function () { setTimeout(tick, PERIOD); });
	}

	tick();
})();
